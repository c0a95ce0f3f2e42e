/*
 * worker: torchserve-c-worker's socket side and step loop (worker.c): the frames of the
 * frontend on one socket, the model's load, and the steps of handle() calls over the requests
 * it holds. The handler ABI it serves is ctx's (ctx.h); ctx reaches back into the loop only
 * through the ctx_io callbacks this module gives it (a flush and a poll in the middle of a
 * handle call).
 * Single-threaded: worker_run() owns the thread until the frontend goes away.
 */
#ifndef TS_WORKER_H
#define TS_WORKER_H

#include <stddef.h>

/* exit codes the frontend acts on */
#define WORKER_EXIT_FATAL 2 /* bad model / handler: do not respawn */

struct worker_opts {
    int fd;                    /* the frontend's end of the socketpair (non-blocking is set here) */
    size_t max_request_size;   /* the largest field of a frame */
    const char *state_dir;     /* sequence state (state.h); NULL: memory only */
    const char *state_redis;   /* redis://...: sequence state in Redis, shared by the instances */
    long busy_poll_us;         /* busy_poll.h */
    size_t stream_buffer_size; /* what a paused request's output may hold here (ctx_park.c) */
};

/* Serves the frontend on o->fd until it closes the socket: 0, 1 after a protocol error, or
 * WORKER_EXIT_FATAL when the fd is not usable. A model that cannot be loaded exits the process
 * with WORKER_EXIT_FATAL after answering the load frame. */
int worker_run(const struct worker_opts *o);

#endif
