/*
 * grpc_tls: the listeners' credentials: insecure, or TLS through gRPC core's SSL credentials
 * when enable_grpc_ssl is set (the same certificate_file and private_key_file as HTTPS).
 */
#include "core/core.h"
#include "grpc_server.h"
#include "log.h"
#include "util.h"

grpc_server_credentials *grpc_server_credentials_from_config(void)
{
    if (!srv->cfg.enable_grpc_ssl)
        return grpc_insecure_server_credentials_create();
    struct buf cert, key;
    buf_init(&cert);
    buf_init(&key);
    grpc_server_credentials *creds = NULL;
    if (!srv->cfg.certificate_file || !srv->cfg.private_key_file ||
        buf_read_file(&cert, srv->cfg.certificate_file, 1 << 20) != 0 ||
        buf_read_file(&key, srv->cfg.private_key_file, 1 << 20) != 0) {
        LOG_ERROR("enable_grpc_ssl: cannot read certificate_file / private_key_file");
    } else {
        buf_put_u8(&cert, 0); /* PEM as C strings */
        buf_put_u8(&key, 0);
        grpc_ssl_pem_key_cert_pair pair = {(const char *)key.data, (const char *)cert.data};
        creds = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
    }
    buf_free(&cert);
    buf_free(&key);
    return creds;
}
