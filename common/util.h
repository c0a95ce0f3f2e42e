/*
 * util: allocation that aborts on OOM, a growable byte buffer, clocks and error codes.
 *
 * Pure helpers shared by the frontend, the worker and the archiver. Any thread may call them.
 * xmalloc & co abort on OOM and are for small internal allocations only: anything whose size a
 * client or a worker controls is checked against a configured maximum before it is allocated.
 */
#ifndef TS_UTIL_H
#define TS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

/* glibc's sys/queue.h lacks the BSD _SAFE iterators */
#ifndef TAILQ_FOREACH_SAFE
#define TAILQ_FOREACH_SAFE(var, head, field, tvar)                                                 \
    for ((var) = TAILQ_FIRST(head); (var) && ((tvar) = TAILQ_NEXT(var, field), 1); (var) = (tvar))
#endif
#ifndef TAILQ_FOREACH_REVERSE_SAFE
#define TAILQ_FOREACH_REVERSE_SAFE(var, head, headname, field, tvar)                               \
    for ((var) = TAILQ_LAST(head, headname);                                                       \
         (var) && ((tvar) = TAILQ_PREV(var, headname, field), 1); (var) = (tvar))
#endif

/* Project error codes: negative, below the errno range. */
enum {
    TS_E_BASE = -10000,
    TS_E_MODEL_NOT_FOUND = TS_E_BASE - 1,
    TS_E_VERSION_NOT_FOUND = TS_E_BASE - 2,
    TS_E_QUEUE_FULL = TS_E_BASE - 3,
    TS_E_NO_WORKER = TS_E_BASE - 4,
    TS_E_BAD_INPUT = TS_E_BASE - 5,
    TS_E_TOO_LARGE = TS_E_BASE - 6,
    TS_E_PROTOCOL = TS_E_BASE - 7,
    TS_E_INCOMPLETE = TS_E_BASE - 8,
    TS_E_BAD_ARCHIVE = TS_E_BASE - 9,
    TS_E_BAD_CONFIG = TS_E_BASE - 10,
    TS_E_EXISTS = TS_E_BASE - 11,
};

const char *ts_strerror(int err);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A per-request array of n elements of size bytes: the caller's own `few` (room for cap of
 * them, on its stack) when n fits, as it nearly always does, else xcalloc'd. free_unless_few
 * releases it either way. */
void *few_or_alloc(void *few, size_t cap, size_t n, size_t size);
void free_unless_few(void *p, const void *few);

/* Growable byte buffer. data is NUL-terminated after len for convenience. */
struct buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

void buf_init(struct buf *b);
void buf_free(struct buf *b);
void buf_reset(struct buf *b);
void buf_reserve(struct buf *b, size_t extra);
void buf_put(struct buf *b, const void *p, size_t n);
void buf_put_u8(struct buf *b, uint8_t v);
void buf_put_i32(struct buf *b, int32_t v); /* big-endian */
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads a whole file into b (appending). 0, -errno, or TS_E_TOO_LARGE past max bytes. */
int buf_read_file(struct buf *b, const char *path, size_t max);

/* Monotonic clock in microseconds. */
int64_t ts_now_us(void);
/* Wall clock in milliseconds since the epoch. */
int64_t ts_wall_ms(void);
/* The wall clock as log4j's %d{ISO8601} writes it, local time: "2024-05-30T21:46:03,123" (the
 * prefix of TorchServe's metrics logs, which its benchmark tools split on). n >= 24. */
void ts_log4j_time(char *out, size_t n);

/* Strict integer parsing: whole string, in range. 0 or -EINVAL / -ERANGE. */
int ts_parse_long(const char *s, long min, long max, long *out);
/* "true"/"false" (case-insensitive). 0 or -EINVAL. */
int ts_parse_bool(const char *s, int *out);

/* 1 when dir/name is a regular file (symlinks followed), else 0. */
int ts_file_in(const char *dir, const char *name);
/* Removes a directory tree (no symlinks followed). 0 or -errno of the first failure. */
int ts_rmtree(const char *path);

/* Model names and versions follow one rule on every path (REST, gRPC, MANIFEST.json,
 * --models), since both become parts of file paths (the worker's state directory): letters,
 * digits, '-', '_' and '.', never "..", 1 to TS_NAME_MAX bytes; a name starts with a letter, as
 * TorchServe requires. 0, or -1 with why (a client-facing sentence, the value quoted and cut). */
#define TS_NAME_MAX 128
int ts_check_model_name(const char *s, char *why, size_t n);
int ts_check_model_version(const char *s, char *why, size_t n);

/* Which process listens on TCP port (from /proc/net/tcp{,6} and /proc/PID/fd): "pid N (comm)",
 * or "" when it cannot be found (another user's process, say). */
void ts_port_holder(int port, char *out, size_t n);

/* The candidate closest to s by edit distance, if close enough to be a typo (at most a third of
 * s's length, at least 2), else NULL. Case-insensitive. */
const char *ts_closest(const char *s, const char *const *candidates, size_t n);

/* Writes a random UUID v4 string (37 bytes with NUL). */
void ts_uuid(char out[37]);
/* The same from the kernel's CSPRNG (getrandom), for ids that must not be guessed. */
void ts_uuid_secure(char out[37]);

#endif
