/*
 * auth: TorchServe's token authorization. At start the server writes key_file.json (mode 0600)
 * into its working directory:
 *   {"management": {"key": K, "expiration time": ISO-8601}, "inference": {...}, "API": {"key": K}}
 * Keys are 6 random bytes (getrandom) in URL-safe base64 (8 characters). Clients send
 * `Authorization: Bearer <key>`: the inference key on 8080/7070, the management key on
 * 8081/7071. Both expire after token_expiration_min; the API key never expires and is the one
 * that rotates the others (GET /token?type=management|inference on 8081). Keys are compared
 * in constant time.
 *
 * Thread safety: auth_check may be called from any thread; the keys are guarded by a mutex.
 * auth_init/auth_rotate/auth_shutdown run on the loop thread. When token authorization is disabled
 * every check passes.
 */
#ifndef TS_AUTH_H
#define TS_AUTH_H

enum auth_scope {
    AUTH_INFERENCE,
    AUTH_MANAGEMENT,
    AUTH_API, /* the key that may rotate the other two */
};

#define AUTH_KEY_FILE "key_file.json"
#define AUTH_FAIL_TYPE "InvalidKeyException"
#define AUTH_FAIL_MSG                                                                              \
    "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
/* A failed check answers 401 over HTTP (TorchServe: 400) and UNAUTHENTICATED over gRPC. */
#define AUTH_FAIL_STATUS 401

/* enabled = !disable_token_authorization. Generates the keys and writes key_file.json.
 * 0 or -errno (the file could not be written). */
int auth_init(int enabled, double expiration_min);
int auth_enabled(void);
/* authorization: the Authorization header / `authorization` metadata value, NULL if absent.
 * 0 when allowed, -EACCES when missing, malformed, wrong or expired. */
int auth_check(enum auth_scope scope, const char *authorization);
/* New key and expiry for AUTH_INFERENCE or AUTH_MANAGEMENT: key_file.json is rewritten first,
 * and only once it holds the new key does that key replace the old one. 0 with the new key and
 * its expiry (ISO-8601) in key / expires; else -errno and nothing changed. */
int auth_rotate(enum auth_scope scope, char key[16], char expires[64]);
/* Forgets the keys (the key file stays, as TorchServe's; `--stop` removes it). */
void auth_shutdown(void);

#endif
