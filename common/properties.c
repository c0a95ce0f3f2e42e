/*
 * properties: the subset of java.util.Properties that config.properties files use.
 *
 * A logical line is one or more natural lines joined where a line ends in an odd number of
 * backslashes (the continuation's leading blanks are dropped, as Java does). The key runs to the
 * first unescaped '=', ':' or blank; one separator and the blanks around it are skipped. Unlike
 * Java, trailing blanks of a value are trimmed: a stray space after a port number should not turn
 * it into a bad value. Escapes \t \n \r \f \uXXXX and \<any> are decoded in keys and values, then
 * TorchServe's `$$NAME$$` references in values are replaced by getenv(NAME) ("" when unset).
 */
#include "properties.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PROPS_MAX_BYTES (16u << 20)

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\f';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void put_utf8(struct buf *b, unsigned cp)
{
    uint8_t o[3];
    if (cp < 0x80) {
        buf_put_u8(b, (uint8_t)cp);
    } else if (cp < 0x800) {
        o[0] = (uint8_t)(0xc0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3f));
        buf_put(b, o, 2);
    } else {
        o[0] = (uint8_t)(0xe0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (uint8_t)(0x80 | (cp & 0x3f));
        buf_put(b, o, 3);
    }
}

/* Decodes escapes of s[0..n) into out. -1 on a malformed \u escape, -2 on \u0000: keys and
 * values are C strings, and "port\u0000junk" must not quietly read as "port". */
static int unescape(const char *s, size_t n, struct buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            if (s[i] != '\\')
                buf_put_u8(out, (uint8_t)s[i]);
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 't':
            buf_put_u8(out, '\t');
            break;
        case 'n':
            buf_put_u8(out, '\n');
            break;
        case 'r':
            buf_put_u8(out, '\r');
            break;
        case 'f':
            buf_put_u8(out, '\f');
            break;
        case 'u': {
            if (i + 4 >= n)
                return -1;
            unsigned cp = 0;
            for (int k = 1; k <= 4; k++) {
                int h = hexval(s[i + k]);
                if (h < 0)
                    return -1;
                cp = cp * 16 + (unsigned)h;
            }
            if (!cp)
                return -2;
            i += 4;
            put_utf8(out, cp);
            break;
        }
        default:
            buf_put_u8(out, (uint8_t)c);
        }
    }
    return 0;
}

/* Replaces $$NAME$$ with getenv(NAME). A lone "$$" without a closing pair is kept as is. */
static char *substitute_env(const char *v)
{
    struct buf b;
    buf_init(&b);
    buf_puts(&b, "");
    const char *p = v;
    for (;;) {
        const char *open = strstr(p, "$$");
        if (!open)
            break;
        const char *close = strstr(open + 2, "$$");
        if (!close || close == open + 2) {
            buf_put(&b, p, (size_t)(open + 2 - p));
            p = open + 2;
            continue;
        }
        buf_put(&b, p, (size_t)(open - p));
        char *name = xstrndup(open + 2, (size_t)(close - open - 2));
        const char *env = getenv(name);
        free(name);
        if (env)
            buf_puts(&b, env);
        p = close + 2;
    }
    buf_puts(&b, p);
    return (char *)b.data;
}

static void add_prop(struct props *ps, size_t *cap, char *key, char *value, int line)
{
    if (ps->n == *cap) {
        *cap = *cap ? *cap * 2 : 32;
        ps->p = xrealloc(ps->p, *cap * sizeof *ps->p);
    }
    ps->p[ps->n].key = key;
    ps->p[ps->n].value = value;
    ps->p[ps->n].line = line;
    ps->n++;
}

/* Number of backslashes that end s[0..n). */
static size_t trailing_backslashes(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && s[n - 1 - k] == '\\')
        k++;
    return k;
}

static int parse_named(const char *text, size_t len, const char *name, struct props *out, char *err,
                       size_t errlen)
{
    out->p = NULL;
    out->n = 0;
    size_t cap = 0;
    struct buf logical, kb, vb;
    buf_init(&logical);
    buf_init(&kb);
    buf_init(&vb);
    int rc = 0;
    int lineno = 0;
    size_t pos = 0;

    while (pos < len && !rc) {
        /* gather one logical line starting at natural line lineno+1 */
        int start_line = lineno + 1;
        buf_reset(&logical);
        int first = 1, comment = 0;
        for (;;) {
            const char *s = text + pos;
            size_t rest = len - pos;
            const char *nl = memchr(s, '\n', rest);
            size_t ll = nl ? (size_t)(nl - s) : rest;
            pos += ll + (nl ? 1 : 0);
            lineno++;
            size_t n = ll;
            if (n && s[n - 1] == '\r')
                n--;
            size_t i = 0;
            while (i < n && is_blank(s[i]))
                i++;
            if (first && i < n && (s[i] == '#' || s[i] == '!')) {
                comment = 1;
                break;
            }
            first = 0;
            int cont = trailing_backslashes(s + i, n - i) % 2 == 1;
            buf_put(&logical, s + i, n - i - (cont ? 1 : 0));
            if (!cont || pos >= len)
                break;
        }
        if (comment || logical.len == 0)
            continue;
        if (memchr(logical.data, '\0', logical.len)) {
            snprintf(err, errlen, "%s:%d: NUL byte in line", name, start_line);
            rc = TS_E_BAD_CONFIG;
            break;
        }

        const char *l = (const char *)logical.data;
        size_t n = logical.len;
        size_t k = 0;
        while (k < n && !(l[k] == '=' || l[k] == ':' || is_blank(l[k]))) {
            if (l[k] == '\\' && k + 1 < n)
                k++;
            k++;
        }
        size_t kend = k;
        while (k < n && is_blank(l[k]))
            k++;
        if (k < n && (l[k] == '=' || l[k] == ':')) {
            k++;
            while (k < n && is_blank(l[k]))
                k++;
        }
        size_t vend = n;
        while (vend > k && is_blank(l[vend - 1]) && !(vend >= 2 && l[vend - 2] == '\\'))
            vend--;

        buf_reset(&kb);
        buf_reset(&vb);
        int urc = unescape(l, kend, &kb);
        if (!urc)
            urc = unescape(l + k, vend - k, &vb);
        if (urc) {
            snprintf(err, errlen, "%s:%d: %s", name, start_line,
                     urc == -2 ? "\\u0000 (a NUL byte) in line" : "malformed \\uXXXX escape");
            rc = TS_E_BAD_CONFIG;
            break;
        }
        if (kb.len == 0) {
            snprintf(err, errlen, "%s:%d: missing key before '%c'", name, start_line, l[kend]);
            rc = TS_E_BAD_CONFIG;
            break;
        }
        add_prop(out, &cap, xstrndup((const char *)kb.data, kb.len),
                 substitute_env(vb.data ? (const char *)vb.data : ""), start_line);
    }
    buf_free(&logical);
    buf_free(&kb);
    buf_free(&vb);
    if (rc)
        props_free(out);
    return rc;
}

int props_parse_string(const char *text, size_t len, struct props *out, char *err, size_t errlen)
{
    return parse_named(text, len, "properties", out, err, errlen);
}

int props_parse_file(const char *path, struct props *out, char *err, size_t errlen)
{
    out->p = NULL;
    out->n = 0;
    struct buf b;
    buf_init(&b);
    int rc = buf_read_file(&b, path, PROPS_MAX_BYTES);
    if (rc == TS_E_TOO_LARGE)
        snprintf(err, errlen, "%s: file larger than %u bytes", path, PROPS_MAX_BYTES);
    else if (rc)
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-rc));
    else
        rc = parse_named(b.data ? (const char *)b.data : "", b.len, path, out, err, errlen);
    buf_free(&b);
    return rc;
}

const struct prop *props_get(const struct props *ps, const char *key)
{
    for (size_t i = ps->n; i-- > 0;)
        if (!strcmp(ps->p[i].key, key))
            return &ps->p[i];
    return NULL;
}

void props_free(struct props *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        free(ps->p[i].key);
        free(ps->p[i].value);
    }
    free(ps->p);
    ps->p = NULL;
    ps->n = 0;
}
