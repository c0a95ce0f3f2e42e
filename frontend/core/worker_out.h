/*
 * worker_out: what the frontend writes to a worker's socket.
 *
 * A batch leaves at the end of the loop turn that dispatched it, in one send with every other
 * batch that turn gave the same worker: a gRPC drain or an epoll wake-up that brings many
 * requests then costs one system call per worker, and the worker one wake-up, instead of one per
 * batch. Other frames (the load request, sequence events, pause, cancel) leave at once, after
 * the batches that wait, so a worker gets its frames in the order they were made.
 *
 * Loop thread only.
 */
#ifndef TS_WORKER_OUT_H
#define TS_WORKER_OUT_H

#include <stddef.h>

struct worker;

/* The end-of-turn event; worker_pool_init calls it. 0, or -1 if libevent has no memory. */
int worker_out_init(void);
/* Frees it (worker_pool_shutdown). */
void worker_out_shutdown(void);
/* An encoded batch for w, sent at the end of this loop turn. */
void worker_out_batch(struct worker *w, const void *data, size_t len);
/* Any other frame for w, sent now (after w's waiting batches). */
void worker_out_now(struct worker *w, const void *data, size_t len);
/* Closes w's connection, dropping what waits: the worker sees EOF at once. */
void worker_out_close(struct worker *w);

#endif
