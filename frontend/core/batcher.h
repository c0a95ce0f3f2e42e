/*
 * batcher: the dynamic batching policy, as a pure function over a snapshot of one model's
 * queue and workers. TorchServe's batchSize/maxBatchDelay, except that the idle workers share a
 * queue shorter than a full batch each (each takes about queue / idle, at least one) when the
 * model's step takes a millisecond or more (or is not known yet), that when
 * every worker is busy the least loaded one may hold up to a millisecond of full batches queued
 * behind its current one, and that a handler which keeps requests across steps (continuous
 * batching) has its free slots topped up at once. Sequences are not planned here (sequence.c).
 */
#ifndef TS_BATCHER_H
#define TS_BATCHER_H

#include <stdint.h>

struct batcher_worker {
    int ready;    /* loaded and accepting work */
    int inflight; /* requests it holds */
};

struct batcher_view {
    int batch_size;
    int max_batch_delay_ms;
    int continuous;
    int queue_len;
    int64_t oldest_us; /* enqueue time of the oldest queued job */
    int64_t now_us;
    int64_t step_us; /* a batch's time in the worker (moving average), 0 = not known yet */
    const struct batcher_worker *workers;
    int n_workers;
};

/* One batch to send: count jobs from the head of the queue to workers[worker]. */
struct batcher_batch {
    int worker;
    int count;
};

/* The batches to send now, in queue order (out has room for n_workers entries: a worker gets
 * one batch per plan at most); returns how many. With none, *wait_us says when to plan again:
 * after that long (a partial batch waits for maxBatchDelay), or -1 on the next event (a worker
 * frees up, a job arrives). The caller sends them, then plans again with a fresh view. */
int batcher_plan(const struct batcher_view *v, struct batcher_batch *out, int64_t *wait_us);

/* The model's step time after a step of sample_us (a step's handle() time) given the average
 * avg (0: none yet): a longer step is taken at once, a shorter one moves it by an eighth, so
 * that after fast answers (a handler refusing bad input in microseconds) a slow model's next
 * burst is not pipelined 64 deep. The sample is clamped to 1..1e9 µs (7 * avg cannot
 * overflow). */
int64_t batcher_step_average(int64_t avg, int64_t sample_us);

#endif
