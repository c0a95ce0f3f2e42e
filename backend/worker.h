/*
 * worker: torchserve-c-worker's socket side and step loop (worker.c). Exposed for ctx.c, whose
 * ts_flush() and ts_is_cancelled() need the socket in the middle of a handle call.
 * Single-threaded.
 */
#ifndef TS_WORKER_H
#define TS_WORKER_H

#include "ctx.h"

/* Closes the open response frame and writes every queued frame (blocking, whole). 0, or -errno
 * when the frontend is gone. */
int worker_flush(struct ts_ctx *c);

/* Reads what the socket has without blocking and processes the complete frames: cancels mark
 * requests at once, new requests join the pending queue, sequence events wait for the end of the
 * step. */
void worker_poll_input(struct ts_ctx *c);

#endif
