/* Unit tests for the batching policy (frontend/batcher.c). */
#include "../../frontend/core/batcher.c"

#include "tap.h"

static struct batcher_view view(int bs, int delay_ms, int continuous, int queue_len,
                                int64_t waited_us, const struct batcher_worker *w, int n)
{
    struct batcher_view v = {
        .batch_size = bs,
        .max_batch_delay_ms = delay_ms,
        .continuous = continuous,
        .queue_len = queue_len,
        .oldest_us = 1000000,
        .now_us = 1000000 + waited_us,
        .workers = w,
        .n_workers = n,
    };
    return v;
}

/* The old single-batch view of a plan: its first batch, or worker -1 and wait_us. */
struct first {
    int worker, count, n;
    int64_t wait_us;
};

static void plan1(const struct batcher_view *v, struct first *p)
{
    struct batcher_batch b[64];
    p->n = batcher_plan(v, b, &p->wait_us);
    p->worker = p->n > 0 ? b[0].worker : -1;
    p->count = p->n > 0 ? b[0].count : 0;
}

TEST(empty_queue_sends_nothing)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_view v = view(8, 100, 0, 0, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    CHECK_EQ_INT(p.wait_us, -1);
}

TEST(full_batch_goes_at_once)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_view v = view(8, 100, 0, 20, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 8);
}

TEST(partial_batch_waits_for_max_batch_delay_from_the_oldest_job)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_view v = view(8, 100, 0, 3, 40000, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    CHECK_EQ_INT(p.wait_us, 60000);
    v = view(8, 100, 0, 3, 100000, w, 1);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 3);
}

TEST(batch_size_one_never_waits)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_view v = view(1, 100, 0, 1, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 1);
}

TEST(first_idle_worker_wins_and_busy_workers_are_skipped)
{
    struct batcher_worker w[3] = {{1, 4}, {0, 0}, {1, 0}};
    struct batcher_view v = view(4, 5, 0, 10, 0, w, 3);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 2); /* worker 0 is busy, worker 1 not ready */
    CHECK_EQ_INT(p.count, 4);
}

TEST(no_idle_worker_and_no_full_batch_means_wait_for_one)
{
    struct batcher_worker w[2] = {{1, 1}, {1, 2}};
    struct batcher_view v = view(4, 5, 0, 3, 10000, w, 2); /* 3 queued, past maxBatchDelay */
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    CHECK_EQ_INT(p.wait_us, -1);        /* re-planned when a worker frees up, not on a timer */
    w[0].inflight = w[1].inflight = 16; /* full batches, but every worker holds four */
    v = view(4, 5, 0, 10, 0, w, 2);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    CHECK_EQ_INT(p.wait_us, -1);
}

TEST(continuous_tops_up_the_least_loaded_worker_without_waiting)
{
    struct batcher_worker w[2] = {{1, 6}, {1, 3}};
    struct batcher_view v = view(8, 100, 1, 10, 0, w, 2);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 1);
    CHECK_EQ_INT(p.count, 5);
}

TEST(continuous_idle_worker_takes_a_partial_batch_at_once)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_view v = view(8, 100, 1, 2, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 2);
}

TEST(continuous_full_workers_take_nothing)
{
    struct batcher_worker w[1] = {{1, 8}};
    struct batcher_view v = view(8, 100, 1, 2, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
}

TEST(lone_busy_worker_gets_up_to_four_full_batches_before_a_step_time_is_known)
{
    struct batcher_worker w[1] = {{1, 1}};
    struct batcher_view v = view(1, 0, 0, 5, 0, w, 1);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 1);
    w[0].inflight = 3;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    w[0].inflight = 4; /* not a fifth batch */
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    w[0].inflight = 16; /* batchSize 8: two batches in flight, room for two more */
    v = view(8, 5, 0, 9, 0, w, 1);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 8);
    w[0].inflight = 8; /* never a partial one, even after maxBatchDelay */
    v = view(8, 5, 0, 7, 10000, w, 1);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    w[0].ready = 0; /* nor to a worker that is not ready */
    w[0].inflight = 0;
    v = view(1, 0, 0, 5, 0, w, 1);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
}

/* depth: the current batch plus a millisecond of queued ones, 2..64 batches */
TEST(pipeline_depth_follows_the_step_time)
{
    static const struct {
        int bs;
        int64_t step_us;
        int depth; /* batches */
    } c[] = {
        {1, 12, 64},  /* 1 + 83, capped */
        {1, 100, 11}, /* 1 + 10 */
        {8, 250, 5},  /* 1 + 4: 40 requests */
        {1, 999, 2},  /* 1 + 1 */
        {1, 5000, 2}, /* a slow step: its batch and the next */
        {4, 1, 64},   /* a step too short to measure */
        {1, 0, 4},    /* not measured yet */
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct batcher_worker w[1] = {{1, (c[i].depth - 1) * c[i].bs}};
        struct batcher_view v = view(c[i].bs, 5, 0, 3 * c[i].bs, 0, w, 1);
        v.step_us = c[i].step_us;
        struct first p;
        plan1(&v, &p);
        CHECK_EQ_INT(p.worker, 0); /* room for the last one */
        CHECK_EQ_INT(p.count, c[i].bs);
        w[0].inflight = c[i].depth * c[i].bs;
        plan1(&v, &p);
        CHECK_EQ_INT(p.worker, -1); /* full */
    }
}

TEST(busy_pool_pipelines_full_batches_to_the_least_loaded_worker)
{
    struct batcher_worker w[3] = {{1, 3}, {1, 2}, {1, 3}};
    struct batcher_view v = view(1, 0, 0, 5, 0, w, 3);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 1);
    CHECK_EQ_INT(p.count, 1);
    w[1].inflight = 4; /* every worker at depth 4 or 3: the one at 3 */
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    w[0].inflight = w[2].inflight = 4; /* all full */
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    w[2].inflight = 0; /* an idle worker always wins */
    w[0].inflight = 1;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 2);
    struct batcher_worker b[2] = {{1, 8}, {1, 8}}; /* batchSize 8: never a partial batch */
    v = view(8, 5, 0, 7, 10000, b, 2);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    v = view(8, 5, 0, 9, 0, b, 2);
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 8);
}

TEST(busy_worker_of_a_pool_is_pipelined_while_another_loads)
{
    struct batcher_worker w[2] = {{1, 1}, {0, 0}}; /* the loading one is never picked */
    struct batcher_view v = view(1, 0, 0, 5, 0, w, 2);
    struct first p;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 1);
    w[0].ready = 0;
    plan1(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
}

/* issue 37: 8 clients, batchSize 8, 2 workers: each takes 4, in one plan, and the second share
 * does not wait for maxBatchDelay once the first is gone (before, the first took all 8) */
TEST(idle_workers_share_a_queue_shorter_than_a_full_batch_each)
{
    struct batcher_worker w[2] = {{1, 0}, {1, 0}};
    struct batcher_batch b[2];
    int64_t wait;
    struct batcher_view v = view(8, 5, 0, 8, 0, w, 2); /* not due: 8 >= batchSize goes now */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].worker, 0);
    CHECK_EQ_INT(b[0].count, 4);
    CHECK_EQ_INT(b[1].worker, 1);
    CHECK_EQ_INT(b[1].count, 4);
    v = view(8, 5, 0, 9, 0, w, 2); /* the first takes the odd one */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 5);
    CHECK_EQ_INT(b[1].count, 4);
    v = view(8, 5, 0, 16, 0, w, 2); /* a full batch each */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 8);
    CHECK_EQ_INT(b[1].count, 8);
    v = view(8, 5, 0, 20, 0, w, 2); /* the 4 left wait for the next plan (pipelined) */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count + b[1].count, 16);
}

TEST(a_short_partial_queue_still_waits_for_max_batch_delay_then_is_shared)
{
    struct batcher_worker w[2] = {{1, 0}, {1, 0}};
    struct batcher_batch b[2];
    int64_t wait;
    struct batcher_view v = view(8, 5, 0, 3, 1000, w, 2);
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 0);
    CHECK_EQ_INT((int)wait, 4000);
    v = view(8, 5, 0, 3, 5000, w, 2);
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 2);
    CHECK_EQ_INT(b[1].count, 1);
    v = view(8, 5, 0, 1, 5000, w, 2); /* one job: one worker, the other stays idle */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 1);
    CHECK_EQ_INT(b[0].worker, 0);
    CHECK_EQ_INT(b[0].count, 1);
}

TEST(only_the_idle_workers_share_and_busy_ones_are_not_pipelined_meanwhile)
{
    struct batcher_worker w[4] = {{1, 4}, {1, 0}, {0, 0}, {1, 0}};
    struct batcher_batch b[4];
    int64_t wait;
    struct batcher_view v = view(4, 5, 0, 6, 0, w, 4);
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].worker, 1);
    CHECK_EQ_INT(b[0].count, 3);
    CHECK_EQ_INT(b[1].worker, 3);
    CHECK_EQ_INT(b[1].count, 3);
}

TEST(batch_size_one_gives_each_idle_worker_one)
{
    struct batcher_worker w[3] = {{1, 0}, {1, 0}, {1, 0}};
    struct batcher_batch b[3];
    int64_t wait;
    struct batcher_view v = view(1, 0, 0, 2, 0, w, 3);
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 1);
    CHECK_EQ_INT(b[1].count, 1);
    CHECK_EQ_INT(b[1].worker, 1);
}

TEST(continuous_idle_workers_share_at_once)
{
    struct batcher_worker w[2] = {{1, 0}, {1, 0}};
    struct batcher_batch b[2];
    int64_t wait;
    struct batcher_view v = view(8, 100, 1, 6, 0, w, 2);
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 3);
    CHECK_EQ_INT(b[1].count, 3);
}

/* Whatever the sizes, a plan for idle workers sends min(q, idle x batchSize) jobs, to
 * min(q, idle) workers, one batch each, between 1 and batchSize jobs, the shares at most one
 * apart: N workers never take less of a queue than one would. */
TEST(a_shared_plan_sends_everything_it_can_evenly)
{
    for (int bs = 1; bs <= 9; bs++)
        for (int idle = 1; idle <= 5; idle++)
            for (int q = 1; q <= 50; q++) {
                struct batcher_worker w[5];
                for (int i = 0; i < idle; i++)
                    w[i] = (struct batcher_worker){1, 0};
                struct batcher_batch b[5];
                int64_t wait;
                struct batcher_view v = view(bs, 5, 0, q, 5000, w, idle);
                int n = batcher_plan(&v, b, &wait);
                int want = q < idle * bs ? q : idle * bs, sum = 0, lo = bs, hi = 0;
                CHECK_EQ_INT(n, q < idle ? q : idle);
                for (int k = 0; k < n; k++) {
                    CHECK_EQ_INT(b[k].worker, k);
                    CHECK(b[k].count >= 1 && b[k].count <= bs);
                    sum += b[k].count;
                    lo = b[k].count < lo ? b[k].count : lo;
                    hi = b[k].count > hi ? b[k].count : hi;
                }
                CHECK_EQ_INT(sum, want);
                CHECK(hi - lo <= 1);
            }
}

/* a model whose step takes microseconds: another frame costs more than the parallel step saves,
 * so a short queue goes out in full batches, the first idle worker first, as before */
TEST(a_short_step_keeps_full_batches_for_the_first_idle_workers)
{
    struct batcher_worker w[3] = {{1, 0}, {1, 0}, {1, 0}};
    struct batcher_batch b[3];
    int64_t wait;
    struct batcher_view v = view(8, 5, 0, 8, 0, w, 3);
    v.step_us = 15;
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 1);
    CHECK_EQ_INT(b[0].worker, 0);
    CHECK_EQ_INT(b[0].count, 8);
    v = view(8, 5, 0, 13, 0, w, 3);
    v.step_us = 15;
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 2);
    CHECK_EQ_INT(b[0].count, 8);
    CHECK_EQ_INT(b[1].worker, 1);
    CHECK_EQ_INT(b[1].count, 5);
    v = view(8, 5, 0, 8, 0, w, 3);
    v.step_us = 1000; /* a millisecond or more: shared */
    CHECK_EQ_INT(batcher_plan(&v, b, &wait), 3);
    CHECK_EQ_INT(b[0].count + b[1].count + b[2].count, 8);
}

int main(void)
{
    RUN(empty_queue_sends_nothing);
    RUN(full_batch_goes_at_once);
    RUN(partial_batch_waits_for_max_batch_delay_from_the_oldest_job);
    RUN(batch_size_one_never_waits);
    RUN(first_idle_worker_wins_and_busy_workers_are_skipped);
    RUN(no_idle_worker_and_no_full_batch_means_wait_for_one);
    RUN(continuous_tops_up_the_least_loaded_worker_without_waiting);
    RUN(continuous_idle_worker_takes_a_partial_batch_at_once);
    RUN(continuous_full_workers_take_nothing);
    RUN(lone_busy_worker_gets_up_to_four_full_batches_before_a_step_time_is_known);
    RUN(pipeline_depth_follows_the_step_time);
    RUN(busy_pool_pipelines_full_batches_to_the_least_loaded_worker);
    RUN(busy_worker_of_a_pool_is_pipelined_while_another_loads);
    RUN(idle_workers_share_a_queue_shorter_than_a_full_batch_each);
    RUN(a_short_partial_queue_still_waits_for_max_batch_delay_then_is_shared);
    RUN(only_the_idle_workers_share_and_busy_ones_are_not_pipelined_meanwhile);
    RUN(batch_size_one_gives_each_idle_worker_one);
    RUN(continuous_idle_workers_share_at_once);
    RUN(a_shared_plan_sends_everything_it_can_evenly);
    RUN(a_short_step_keeps_full_batches_for_the_first_idle_workers);
    return tap_done();
}
