/*
 * http_tls: the OpenSSL server context of the https:// listeners, from TorchServe's
 * certificate_file and private_key_file (PEM; the certificate file may hold a chain, the
 * server's certificate first). Each accepted connection of such a listener gets an OpenSSL
 * bufferevent (http_guard.c). Loop thread only.
 */
#ifndef TS_HTTP_TLS_H
#define TS_HTTP_TLS_H

#include <stddef.h>

struct ssl_ctx_st;

/* A context for cert and key, or NULL with err naming the file and the reason (missing,
 * unreadable, not PEM, key not matching the certificate). Free with http_tls_ctx_free. */
struct ssl_ctx_st *http_tls_ctx_new(const char *cert, const char *key, char *err, size_t errlen);
void http_tls_ctx_free(struct ssl_ctx_st *ctx);

#endif
