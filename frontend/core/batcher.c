/*
 * batcher: picks the workers and the number of jobs for the next batches of a model.
 *
 * An idle worker (nothing in flight) is always preferred, so a batch never queues behind another
 * worker's batch. A partial batch for an idle worker waits until the oldest job has waited
 * maxBatchDelay, unless the handler is continuous: there a request that arrives later simply
 * joins the next step, so waiting only adds latency. A busy worker gets more work only when its
 * handler is continuous and it has free slots.
 *
 * Several idle workers share what is queued when it would not give each a full batch: with q
 * jobs and n idle workers, each takes q / n (the first q % n one more), at least one, all in the
 * same plan, so the second share does not wait for maxBatchDelay again once the first has gone.
 * Before, the first idle worker took all of a short queue and the others waited: with 8 clients,
 * batchSize 8 and 2 workers, two workers served like one (issue 37; resnet18 ran at 0.6x of its
 * own batchSize 1). A queue of n full batches or more still gives each a full batch. A continuous
 * handler's idle workers share the same way; its busy ones are then topped up as before. The
 * share is for models whose step is long enough to gain from running in parallel: once the
 * model's step time is known and under BATCHER_SPLIT_US, a short queue goes out in full
 * batches, as before, since splitting it only adds frames (the mlp, a 15 µs step, served about
 * 10% less at batchSize 8, 8 connections, 2 workers, when split).
 *
 * When every ready worker is busy, the least loaded one may still take a full batch: the worker
 * finds the next ones in its socket when it answers and runs them back to back, instead of
 * sleeping until the frontend has read each answer and written the next batch. With batchSize 1
 * those wake-ups were most of every request's cost (perf: ~70% of both processes' time in the
 * kernel). How many batches a worker may hold follows the model's step time (the handle() time
 * each answer carries, averaged by the pool): its current one plus up to BATCHER_PIPELINE_US of
 * queued ones, at least 2 and at most BATCHER_PIPELINE_MAX in all, and 4 until a step time is
 * known. A fixed depth of 4 beat 2 by 25-60%; for a 12-15 µs step (the mlp) 64 beat 4 by 8-30%
 * over HTTP, OIP and gRPC, as the worker and the frontend each handle many frames per wake-up
 * (docs/performance.md). The time bound keeps what a queued batch can wait behind one worker
 * while another frees up, and what a worker's death fails, to about a millisecond: a model whose
 * step takes that long holds its current batch and the next only.
 *
 * This used to be done for a lone worker only, so that a batch could never wait behind one
 * worker's batch while another became idle; but then every worker of a pool slept between its
 * batches, and 2 workers at batchSize 1 served a third less than 1 (issue 16). An idle worker is
 * still always preferred, and partial batches are never pipelined.
 */
#include "batcher.h"

/* a busy worker's queued full batches: about this much of its time (see above) */
#define BATCHER_PIPELINE_US 1000
/* idle workers share a short queue when a step takes at least this long, or is not known yet */
#define BATCHER_SPLIT_US 1000
#define BATCHER_PIPELINE_MIN 2
#define BATCHER_PIPELINE_MAX 64
#define BATCHER_PIPELINE_UNKNOWN 4

/* Full batches a busy worker may hold: its current one plus the ones queued in its socket. */
static int pipeline_depth(int64_t step_us)
{
    if (step_us <= 0)
        return BATCHER_PIPELINE_UNKNOWN;
    int64_t d = 1 + BATCHER_PIPELINE_US / step_us;
    return d < BATCHER_PIPELINE_MIN   ? BATCHER_PIPELINE_MIN
           : d > BATCHER_PIPELINE_MAX ? BATCHER_PIPELINE_MAX
                                      : (int)d;
}

int batcher_plan(const struct batcher_view *v, struct batcher_batch *out, int64_t *wait_us)
{
    *wait_us = -1;
    if (v->queue_len <= 0)
        return 0;
    int bs = v->batch_size > 0 ? v->batch_size : 1;

    int n_idle = 0, partial = -1, least = -1;
    for (int i = 0; i < v->n_workers; i++) {
        const struct batcher_worker *w = &v->workers[i];
        if (!w->ready)
            continue;
        if (w->inflight == 0) {
            out[n_idle++].worker = i; /* the idle ones, in order, for now */
            continue;
        }
        if (v->continuous && w->inflight < bs &&
            (partial < 0 || w->inflight < v->workers[partial].inflight))
            partial = i;
        if (least < 0 || w->inflight < v->workers[least].inflight)
            least = i;
    }

    if (n_idle > 0) {
        int q = v->queue_len;
        if (q < bs && !v->continuous && bs > 1) {
            int64_t due = v->oldest_us + (int64_t)v->max_batch_delay_ms * 1000;
            if (v->now_us < due) {
                *wait_us = due - v->now_us;
                return 0;
            }
        }
        if (q >= n_idle * bs) { /* a long queue: a full batch each */
            for (int k = 0; k < n_idle; k++)
                out[k].count = bs;
            return n_idle;
        }
        if (v->step_us > 0 && v->step_us < BATCHER_SPLIT_US) {
            /* a step this short costs less than another frame would: full batches first */
            int n = 0;
            for (; q > 0; n++, q -= bs)
                out[n].count = q < bs ? q : bs;
            return n;
        }
        /* a short one is shared: q / n each, the first q % n one more (at most bs, since
         * q < n_idle * bs), and no idle worker without a job while another takes two */
        int n = q < n_idle ? q : n_idle;
        for (int k = 0; k < n; k++)
            out[k].count = q / n + (k < q % n);
        return n;
    }
    if (!v->continuous && least >= 0 && v->queue_len >= bs &&
        v->workers[least].inflight + bs <= pipeline_depth(v->step_us) * bs) {
        out[0].worker = least;
        out[0].count = bs;
        return 1;
    }
    if (partial >= 0) {
        int free_slots = bs - v->workers[partial].inflight;
        out[0].worker = partial;
        out[0].count = v->queue_len < free_slots ? v->queue_len : free_slots;
        return 1;
    }
    return 0;
}

int64_t batcher_step_average(int64_t avg, int64_t sample_us)
{
    int64_t us = sample_us < 1 ? 1 : sample_us > 1000000000 ? 1000000000 : sample_us;
    return avg > 0 && us < avg ? (7 * avg + us + 4) / 8 : us;
}
