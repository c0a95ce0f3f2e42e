/*
 * state_redis: the shared sequence-state backend: one model's state values in Redis, under
 * "<prefix>:<sequence id>", so that any instance's worker can continue a sequence whose instance
 * died (state.c uses it in place of LMDB when the worker runs with --state-redis).
 *
 * Owns: one hiredis connection (Debian's libhiredis), reconnected once per operation after it
 * broke, and the writes staged since the last commit. A commit sends them in one MULTI ... EXEC
 * and waits for EXEC's answer: a write is acknowledged only once Redis has applied the whole
 * step's writes. Values are read from Redis on every get: another instance may have written them
 * since (a sequence that moved and came back).
 *
 * Threading: the worker's single thread. Errors: 0 or a negative errno (-ECONNREFUSED, -EIO,
 * -ETIMEDOUT, -EINVAL for a bad URL); state_redis_error() says what Redis or the connection said.
 */
#ifndef TS_STATE_REDIS_H
#define TS_STATE_REDIS_H

#include <stddef.h>

struct state_redis;

/* url: redis://[:PASSWORD@]HOST:PORT[/DB]. ttl_ms > 0: every value expires that long after its
 * last write (a sequence idle that long is expired anyway). Connects at once. */
int state_redis_open(struct state_redis **out, const char *url, const char *prefix, long ttl_ms,
                     char *err, size_t errlen);
/* Drops staged writes and the connection. NULL is ok. */
void state_redis_close(struct state_redis *r);

/* The value of key: 0 with *val (malloc'd, NUL-terminated for convenience) and *len, -ENOENT,
 * or an error. */
int state_redis_get(struct state_redis *r, const char *key, char **val, size_t *len);
/* Stage a write or a removal for the next commit (copied). */
void state_redis_stage_set(struct state_redis *r, const char *key, const void *val, size_t len);
void state_redis_stage_del(struct state_redis *r, const char *key);
/* Applies the staged writes in one transaction; they are dropped either way. */
int state_redis_commit(struct state_redis *r);
/* 1 while writes are staged. */
int state_redis_pending(const struct state_redis *r);
/* The last error's text ("" if none). */
const char *state_redis_error(const struct state_redis *r);

#endif
