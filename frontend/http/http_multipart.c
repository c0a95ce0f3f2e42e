/*
 * http_multipart: the multipart/form-data parser (see http_multipart.h).
 *
 * RFC 2046 section 5.1.1: the body is a preamble, then parts each introduced by a delimiter
 * line ("--" boundary, optional white space, CRLF), and a close delimiter ("--" boundary "--").
 * A delimiter is only recognised at the start of the body or after a CRLF, which belongs to the
 * delimiter, not to the part before it. Part heads are header lines up to an empty line; only
 * Content-Disposition and Content-Type are read (RFC 7578 deprecates the others), a bare LF is
 * accepted as a line end, as most servers do.
 */
#include "http_multipart.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(why, n, "multipart/form-data: ");
    if (k > 0 && (size_t)k < n)
        vsnprintf(why + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* The value of parameter `key` in a header value like `form-data; name="a"; filename=b`, into
 * out (at most outlen - 1 bytes). 1 found, 0 absent, -1 malformed or too long. */
static int header_param(const char *v, const char *end, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    const char *p = v;
    while (p < end && *p != ';')
        p++;
    while (p < end) {
        p = skip_ws(p + 1, end); /* past ';' */
        const char *k = p;
        while (p < end && *p != '=' && *p != ';')
            p++;
        const char *ke = p;
        while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t'))
            ke--;
        int match = (size_t)(ke - k) == kl && !strncasecmp(k, key, kl);
        if (p >= end || *p == ';') {
            continue; /* a parameter without a value */
        }
        p = skip_ws(p + 1, end);
        size_t o = 0;
        int bad = 0;
        if (p < end && *p == '"') {
            p++;
            for (; p < end && *p != '"'; p++) {
                if (*p == '\\' && p + 1 < end)
                    p++;
                if (o + 1 >= outlen)
                    bad = 1;
                else if (match)
                    out[o++] = *p;
            }
            if (p >= end)
                return match ? -1 : 0; /* unterminated quoted string */
            p++;
        } else {
            for (; p < end && *p != ';' && *p != ' ' && *p != '\t'; p++) {
                if (o + 1 >= outlen)
                    bad = 1;
                else if (match)
                    out[o++] = *p;
            }
        }
        if (match) {
            out[o] = '\0';
            return bad ? -1 : 1;
        }
        while (p < end && *p != ';')
            p++;
    }
    return 0;
}

int http_multipart_is_form(const char *ctype)
{
    if (!ctype)
        return 0;
    ctype += strspn(ctype, " \t");
    return !strncasecmp(ctype, "multipart/form-data", 19) &&
           (ctype[19] == '\0' || ctype[19] == ';' || ctype[19] == ' ' || ctype[19] == '\t');
}

/* The next delimiter "--boundary" at the start of a line, from p: its position, or NULL. */
static const char *find_delim(const char *body, const char *p, const char *end, const char *b,
                              size_t bl)
{
    while (p < end) {
        const char *d = memmem(p, (size_t)(end - p), b, bl);
        if (!d)
            return NULL;
        if (d == body || (d - body >= 1 && d[-1] == '\n'))
            return d;
        p = d + 1;
    }
    return NULL;
}

/* Reads one part's head, [p, end) starting after the delimiter line; sets *content to where
 * the content starts. 0, or -1 with why. */
static int part_head(const char *p, const char *end, int idx, struct http_part *part,
                     const char **content, char *why, size_t whylen)
{
    const char *start = p;
    int have_disposition = 0;
    for (;;) {
        if ((size_t)(p - start) > HTTP_MULTIPART_HEAD_MAX)
            return fail(why, whylen, "part %d: its head is longer than %d bytes", idx + 1,
                        HTTP_MULTIPART_HEAD_MAX);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return fail(why, whylen, "part %d: its head does not end (no empty line)", idx + 1);
        const char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (le == p) { /* the empty line */
            *content = nl + 1;
            break;
        }
        for (const char *c = p; c < le; c++)
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
                return fail(why, whylen, "part %d: a control character in its head", idx + 1);
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (!colon || colon == p)
            return fail(why, whylen, "part %d: malformed header line in its head", idx + 1);
        size_t kl = (size_t)(colon - p);
        const char *v = skip_ws(colon + 1, le);
        if (kl == 19 && !strncasecmp(p, "Content-Disposition", 19)) {
            const char *ve = v;
            while (ve < le && *ve != ';' && *ve != ' ' && *ve != '\t')
                ve++;
            if ((size_t)(ve - v) != 9 || strncasecmp(v, "form-data", 9))
                return fail(why, whylen, "part %d: Content-Disposition must be form-data", idx + 1);
            int rc = header_param(v, le, "name", part->name, sizeof(part->name));
            if (rc < 0)
                return fail(why, whylen, "part %d: its name is malformed or longer than %d bytes",
                            idx + 1, HTTP_MULTIPART_NAME_MAX);
            if (rc == 0 || !part->name[0])
                return fail(why, whylen, "part %d: Content-Disposition has no name", idx + 1);

            char fname[HTTP_MULTIPART_NAME_MAX * 4];
            part->is_file = header_param(v, le, "filename", fname, sizeof(fname)) != 0;
            have_disposition = 1;
        } else if (kl == 12 && !strncasecmp(p, "Content-Type", 12)) {
            size_t n = (size_t)(le - v);
            while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            if (n == 0 || n >= sizeof(part->ctype))
                return fail(why, whylen, "part %d: Content-Type is empty or longer than %zu bytes",
                            idx + 1, sizeof(part->ctype) - 1);
            memcpy(part->ctype, v, n);
            part->ctype[n] = '\0';
        }
        p = nl + 1;
    }
    if (!have_disposition)
        return fail(why, whylen, "part %d: no Content-Disposition: form-data; name=\"...\"",
                    idx + 1);
    if (part->is_file && !part->ctype[0])
        snprintf(part->ctype, sizeof(part->ctype), "application/octet-stream");
    return 0;
}

int http_multipart_parse(const char *ctype, const char *body, size_t len, struct http_part *out,
                         int max, char *why, size_t whylen)
{
    char bnd[HTTP_MULTIPART_BOUNDARY_MAX + 3] = "--";
    const char *cend = ctype + strlen(ctype);
    int rc = header_param(ctype, cend, "boundary", bnd + 2, sizeof(bnd) - 2);
    if (rc <= 0 || !bnd[2])
        return fail(why, whylen,
                    rc < 0 ? "the boundary is longer than %d characters"
                           : "the Content-Type names no boundary (at most %d characters)",
                    HTTP_MULTIPART_BOUNDARY_MAX);
    size_t bl = strlen(bnd);
    const char *end = body + len;
    const char *d = find_delim(body, body, end, bnd, bl);
    if (!d)
        return fail(why, whylen, "the body holds no boundary line");
    int n = 0;
    for (;;) {
        const char *p = d + bl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return n; /* the close delimiter; the epilogue is ignored */
        p = skip_ws(p, end);
        if (p < end && *p == '\r')
            p++;
        if (p >= end || *p != '\n')
            return fail(why, whylen, "part %d: the boundary line does not end with CRLF", n + 1);
        p++;
        if (n >= max)
            return fail(why, whylen, "more than %d parts", max);
        struct http_part *part = &out[n];
        memset(part, 0, sizeof(*part));
        const char *content;
        if (part_head(p, end, n, part, &content, why, whylen))
            return -1;
        const char *next = find_delim(body, content, end, bnd, bl);
        if (!next)
            return fail(why, whylen, "part %d: the body ends before its closing boundary", n + 1);
        /* the line break before the delimiter is the delimiter's */
        const char *ce = next;
        if (ce > content && ce[-1] == '\n')
            ce--;
        if (ce > content && ce[-1] == '\r')
            ce--;
        part->data = content;
        part->len = (size_t)(ce - content);
        n++;
        d = next;
    }
}
