/*
 * handler_reply: what the frontend lets through of an answer a handler wrote, whatever the
 * transport: the status and the headers of each prediction in a worker's frame. A handler
 * (Python, C, a .so from an archive) is code the frontend does not trust with the wire:
 *   - a status outside 200..599 (PredictionException(code=99999), 101, -5) becomes 500; 0,
 *     "unset", is 200;
 *   - a header that would change the answer's framing or the connection (Content-Length,
 *     Transfer-Encoding, Connection and the other hop-by-hop fields of RFC 9110 section 7.6.1)
 *     is dropped: the transport frames the answer itself;
 *   - a header whose name is not an RFC 9110 token or whose value holds a control character
 *     (CR, LF, NUL, ...) is dropped: it could not be written as one header line;
 *   - the worker's debug counters (x-ts-worker-*) are dropped unless worker_debug_headers is on.
 *
 * Pure: no I/O, no globals; the caller (worker_pool) logs what was dropped. Any thread.
 */
#ifndef TS_HANDLER_REPLY_H
#define TS_HANDLER_REPLY_H

#include <stddef.h>
#include <stdint.h>

struct otf_prediction;

enum handler_header {
    HANDLER_HEADER_KEEP,
    HANDLER_HEADER_FRAMING, /* Content-Length, Transfer-Encoding, Connection, ... */
    HANDLER_HEADER_INVALID, /* not a token name, or a control character in the value */
    HANDLER_HEADER_DEBUG,   /* x-ts-worker-*, with keep_debug off */
};

#define HANDLER_DEBUG_PREFIX "x-ts-worker-"

/* The verdict on one header of a handler's answer. */
enum handler_header handler_reply_header(const char *key, size_t klen, const char *val, size_t vlen,
                                         int keep_debug);
/* The status the client gets for a handler's status s. */
int32_t handler_reply_status(int32_t s);

/* What handler_reply_filter dropped, for one log line. */
struct handler_reply_dropped {
    int status_from; /* the handler's status when it was replaced, else 0 */
    size_t framing;  /* how many headers of each kind */
    size_t invalid;
    size_t debug;
    char first_framing[32]; /* the first framing header's name (printable, cut) */
};

/* Applies the rules to p in place (p->headers is compacted; the strings stay where they are). */
void handler_reply_filter(struct otf_prediction *p, int keep_debug,
                          struct handler_reply_dropped *d);

#endif
