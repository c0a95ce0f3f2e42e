/*
 * multipart: multipart/form-data bodies (frontend/http/http_multipart.c). Input: the first line
 * is the Content-Type value (the boundary), the rest the body. Parts the parser returns lie
 * inside the body, have a non-empty name without control characters (TAB aside, as in any header
 * line), no content type longer than their buffer, and no delimiter line inside their content; a
 * file always has a content type. Round trip: the parts written again as a canonical body (CRLF,
 * quoted names, the same boundary) parse to the same parts. A refusal says what is wrong.
 */
#include "../../frontend/http/http_multipart.h"

#include "fuzz.h"

static void put(struct buf *b, const void *p, size_t n)
{
    buf_put(b, p, n);
}

static void puts_(struct buf *b, const char *s)
{
    buf_puts(b, s);
}

/* The canonical body's boundary: one whose delimiter occurs in no part's content. */
static const char *fresh_boundary(const struct http_part *parts, int n, char *out, size_t outlen)
{
    for (unsigned k = 0;; k++) {
        snprintf(out, outlen, "fz%08x", k * 2654435761u);
        char delim[32];
        snprintf(delim, sizeof(delim), "--%s", out);
        int clash = 0;
        for (int i = 0; i < n && !clash; i++)
            clash = parts[i].len >= strlen(delim) &&
                    memmem(parts[i].data, parts[i].len, delim, strlen(delim)) != NULL;
        if (!clash)
            return out;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *end = s + size;
    const char *nl = memchr(s, '\n', size);
    char *ctype = xstrndup(s, nl ? (size_t)(nl - s) : size);
    const char *body = nl ? nl + 1 : end;
    size_t blen = (size_t)(end - body);
    int max = HTTP_MULTIPART_MAX_PARTS;
    struct http_part *parts = xmalloc((size_t)max * sizeof(*parts));
    char why[256];
    why[0] = '\0';
    int n = http_multipart_parse(ctype, body, blen, parts, max, why, sizeof(why));
    if (n < 0) {
        FUZZ_CHECK(!strncmp(why, "multipart/form-data: ", 21) && strlen(why) > 21);
        goto out;
    }
    FUZZ_CHECK(n <= max);
    for (int i = 0; i < n; i++) {
        const struct http_part *p = &parts[i];
        FUZZ_CHECK(p->data >= body && p->data + p->len <= end);
        FUZZ_CHECK(p->name[0] && strlen(p->name) <= HTTP_MULTIPART_NAME_MAX);
        for (const char *c = p->name; *c; c++)
            FUZZ_CHECK(((unsigned char)*c >= 0x20 || *c == '\t') && *c != 0x7f);
        FUZZ_CHECK(strlen(p->ctype) < sizeof(p->ctype));
        FUZZ_CHECK(!p->is_file || p->ctype[0]);
    }
    /* round trip through a canonical body */
    char b[32];
    fresh_boundary(parts, n, b, sizeof(b));
    struct buf w;
    buf_init(&w);
    for (int i = 0; i < n; i++) {
        const struct http_part *p = &parts[i];
        puts_(&w, "--");
        puts_(&w, b);
        puts_(&w, "\r\nContent-Disposition: form-data; name=\"");
        for (const char *c = p->name; *c; c++) {
            if (*c == '"' || *c == '\\')
                put(&w, "\\", 1);
            put(&w, c, 1);
        }
        puts_(&w, "\"");
        if (p->is_file)
            puts_(&w, "; filename=\"f\"");
        if (p->ctype[0]) {
            puts_(&w, "\r\nContent-Type: ");
            puts_(&w, p->ctype);
        }
        puts_(&w, "\r\n\r\n");
        put(&w, p->data, p->len);
        puts_(&w, "\r\n");
    }
    puts_(&w, "--");
    puts_(&w, b);
    puts_(&w, "--\r\n");
    char *ct2 = xasprintf("multipart/form-data; boundary=%s", b);
    struct http_part *again = xmalloc((size_t)max * sizeof(*again));
    int m = http_multipart_parse(ct2, n ? (const char *)w.data : "--x", n ? w.len : 3, again, max,
                                 why, sizeof(why));
    if (n == 0) {
        FUZZ_CHECK(m < 0); /* a body with no part at all: "--b--" is read as zero parts */
    } else {
        FUZZ_CHECK(m == n);
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(!strcmp(again[i].name, parts[i].name));
            FUZZ_CHECK(!strcmp(again[i].ctype, parts[i].ctype));
            FUZZ_CHECK(again[i].is_file == parts[i].is_file);
            FUZZ_CHECK(again[i].len == parts[i].len &&
                       !memcmp(again[i].data, parts[i].data, parts[i].len));
        }
    }
    free(again);
    free(ct2);
    buf_free(&w);
out:
    free(parts);
    free(ctype);
    return 0;
}
