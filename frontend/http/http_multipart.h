/*
 * http_multipart: multipart/form-data request bodies (RFC 7578) as TorchServe reads them: each
 * part becomes a request parameter named by its Content-Disposition's `name`, with its bytes,
 * and, for a file (a part with a `filename`), its Content-Type (application/octet-stream when
 * it has none); a plain field has no content type, so a Python handler gets its bytes, as
 * TorchServe's Netty decoder gives them. So `curl -F data=@kitten.jpg` reaches the handler as
 * the parameter "data" holding the image.
 *
 * Limits: at most HTTP_MULTIPART_MAX_PARTS parts, each part's head at most
 * HTTP_MULTIPART_HEAD_MAX bytes, a name at most HTTP_MULTIPART_NAME_MAX bytes; the body as a
 * whole is bounded by max_request_size before it gets here. A body that breaks a rule is
 * refused with a message that names the part and the problem.
 *
 * Pure: no I/O, no globals. The parts point into the body (not NUL-terminated, but names and
 * content types are copied).
 */
#ifndef TS_HTTP_MULTIPART_H
#define TS_HTTP_MULTIPART_H

#include <stddef.h>

#define HTTP_MULTIPART_MAX_PARTS 64
#define HTTP_MULTIPART_HEAD_MAX 8192
#define HTTP_MULTIPART_NAME_MAX 256
#define HTTP_MULTIPART_BOUNDARY_MAX 70 /* RFC 2046 section 5.1.1 */

struct http_part {
    char name[HTTP_MULTIPART_NAME_MAX + 1];
    char ctype[128]; /* "" for a field without one */
    int is_file;
    const char *data; /* into the body */
    size_t len;
};

/* 1 when the Content-Type header value names multipart/form-data (any case, with parameters). */
int http_multipart_is_form(const char *ctype);
/* Splits body by the boundary of ctype (a multipart/form-data Content-Type value) into parts
 * (at most max, out has room for it). Returns the number of parts, or -1 with why filled. */
int http_multipart_parse(const char *ctype, const char *body, size_t len, struct http_part *out,
                         int max, char *why, size_t whylen);

#endif
