/*
 * batcher: picks the worker and the number of jobs for the next batch of a model.
 *
 * An idle worker (nothing in flight) is always preferred, so a batch never queues behind another
 * worker's batch. A partial batch for an idle worker waits until the oldest job has waited
 * maxBatchDelay, unless the handler is continuous: there a request that arrives later simply
 * joins the next step, so waiting only adds latency. A busy worker gets more work only when its
 * handler is continuous and it has free slots.
 *
 * A model with a single worker may have up to BATCHER_LONE_DEPTH full batches in flight: the
 * worker finds the next ones in its socket when it answers and runs them back to back, instead
 * of sleeping until the frontend has read each answer and written the next batch. With
 * batchSize 1 those wake-ups were most of every request's cost (perf: ~70% of both processes'
 * time in the kernel); depth 4 beat depth 2 by 25-60% in alternated wrk runs. With two or more
 * workers this is never done, since the batch could wait behind one worker's batch while
 * another became idle.
 */
#include "batcher.h"

/* full batches a lone worker may hold: its current one plus the ones queued in its socket */
#define BATCHER_LONE_DEPTH 4

void batcher_plan(const struct batcher_view *v, struct batcher_plan *out)
{
    out->worker = -1;
    out->count = 0;
    out->wait_us = -1;
    if (v->queue_len <= 0)
        return;
    int bs = v->batch_size > 0 ? v->batch_size : 1;

    int idle = -1, partial = -1;
    for (int i = 0; i < v->n_workers; i++) {
        const struct batcher_worker *w = &v->workers[i];
        if (!w->ready)
            continue;
        if (w->inflight == 0) {
            idle = i;
            break;
        }
        if (v->continuous && w->inflight < bs &&
            (partial < 0 || w->inflight < v->workers[partial].inflight))
            partial = i;
    }

    if (idle >= 0) {
        if (v->queue_len < bs && !v->continuous && bs > 1) {
            int64_t due = v->oldest_us + (int64_t)v->max_batch_delay_ms * 1000;
            if (v->now_us < due) {
                out->wait_us = due - v->now_us;
                return;
            }
        }
        out->worker = idle;
        out->count = v->queue_len < bs ? v->queue_len : bs;
        return;
    }
    if (partial < 0 && !v->continuous && v->n_workers == 1 && v->workers[0].ready &&
        v->workers[0].inflight + bs <= BATCHER_LONE_DEPTH * bs && v->queue_len >= bs) {
        out->worker = 0;
        out->count = bs;
        return;
    }
    if (partial >= 0) {
        int free_slots = bs - v->workers[partial].inflight;
        out->worker = partial;
        out->count = v->queue_len < free_slots ? v->queue_len : free_slots;
    }
}
