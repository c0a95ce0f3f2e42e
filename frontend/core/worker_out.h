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

#include "util.h"

struct bufferevent;

/* A worker's connection: its socket, and the batches that wait for the end of the turn. */
struct worker_conn {
    struct bufferevent *bev; /* NULL once closed */
    struct buf pend;
    int listed; /* on the list of connections with batches waiting */
    /* Jobs of the batches since the last one the socket took: they wait in pend, or never
     * reached the worker (dropped by a close, or refused because the worker was gone). A dead
     * worker's pool puts them back in the queue: they cannot have killed it. A spawn zeroes it
     * for the new process. */
    int unsent;
};

/* The end-of-turn event; worker_pool_init calls it. 0, or -1 if libevent has no memory. */
int worker_out_init(void);
/* Frees it (worker_pool_shutdown). */
void worker_out_shutdown(void);
/* A batch is encoded straight into worker_out_batch_buf's buffer (appended to the batches that
 * wait); worker_out_batch_end (its number of jobs) then sends it at the end of this loop turn, or
 * drops it once c is closed. */
struct buf *worker_out_batch_buf(struct worker_conn *c);
void worker_out_batch_end(struct worker_conn *c, int jobs);
/* Any other frame, sent now (after the batches that wait). No-op once c is closed. */
void worker_out_now(struct worker_conn *c, const void *data, size_t len);
/* Closes the connection, dropping what waits (and its buffer): the worker sees EOF at once. The
 * connection may be opened again (a respawn sets bev). */
void worker_out_close(struct worker_conn *c);

#endif
