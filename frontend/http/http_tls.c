/*
 * http_tls: OpenSSL contexts for https:// listeners (see http_tls.h).
 */
#include "http_tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The first OpenSSL error on the queue, as text; the queue is emptied. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown OpenSSL error";
}

struct ssl_ctx_st *http_tls_ctx_new(const char *cert, const char *key, char *err, size_t errlen)
{
    if (!cert || !*cert || !key || !*key) {
        snprintf(err, errlen, "TLS needs both certificate_file and private_key_file");
        return NULL;
    }
    const char *files[] = {cert, key};
    for (int i = 0; i < 2; i++)
        if (access(files[i], R_OK) != 0) {
            snprintf(err, errlen, "%s %s: %s", i ? "private_key_file" : "certificate_file",
                     files[i], strerror(errno));
            return NULL;
        }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "cannot create a TLS context: %s", ssl_reason());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        snprintf(err, errlen, "certificate_file %s: %s", cert, ssl_reason());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        snprintf(err, errlen, "private_key_file %s: %s", key, ssl_reason());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "private_key_file %s does not match certificate_file %s: %s", key,
                 cert, ssl_reason());
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

void http_tls_ctx_free(struct ssl_ctx_st *ctx)
{
    SSL_CTX_free(ctx);
}
