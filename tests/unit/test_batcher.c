/* batcher: which worker gets how many jobs, and when a partial batch waits. */
#include "../../frontend/batcher.c"
#include "tap.h"

static struct batcher_plan plan(int bs, int delay_ms, int continuous, int queue_len,
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
    struct batcher_plan p;
    batcher_plan(&v, &p);
    return p;
}

TEST(idle_worker_gets_a_full_batch)
{
    struct batcher_worker w[2] = {{1, 8}, {1, 0}};
    struct batcher_plan p = plan(8, 5, 0, 20, 0, w, 2);
    CHECK_EQ_INT(p.worker, 1);
    CHECK_EQ_INT(p.count, 8);
}

TEST(partial_batch_waits_for_max_batch_delay)
{
    struct batcher_worker w[1] = {{1, 0}};
    struct batcher_plan p = plan(8, 5, 0, 3, 2000, w, 1);
    CHECK_EQ_INT(p.worker, -1);
    CHECK_EQ_INT(p.wait_us, 3000);
    p = plan(8, 5, 0, 3, 5000, w, 1);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 3);
}

TEST(lone_busy_worker_gets_one_full_batch_more)
{
    struct batcher_worker w[1] = {{1, 1}};
    struct batcher_plan p = plan(1, 0, 0, 5, 0, w, 1);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 1);
    /* not a third batch */
    w[0].inflight = 2;
    p = plan(1, 0, 0, 5, 0, w, 1);
    CHECK_EQ_INT(p.worker, -1);
    /* never a partial one */
    w[0].inflight = 8;
    p = plan(8, 5, 0, 7, 10000, w, 1);
    CHECK_EQ_INT(p.worker, -1);
    /* nor to a worker that is not ready */
    w[0].ready = 0;
    w[0].inflight = 0;
    p = plan(1, 0, 0, 5, 0, w, 1);
    CHECK_EQ_INT(p.worker, -1);
}

TEST(busy_workers_of_a_pool_get_nothing)
{
    struct batcher_worker w[2] = {{1, 1}, {1, 1}};
    struct batcher_plan p = plan(1, 0, 0, 5, 0, w, 2);
    CHECK_EQ_INT(p.worker, -1);
    /* a second worker still loading counts: it may be idle first */
    w[1].ready = 0;
    w[1].inflight = 0;
    p = plan(1, 0, 0, 5, 0, w, 2);
    CHECK_EQ_INT(p.worker, -1);
}

TEST(continuous_worker_is_topped_up)
{
    struct batcher_worker w[2] = {{1, 6}, {1, 3}};
    struct batcher_plan p = plan(8, 100, 1, 10, 0, w, 2);
    CHECK_EQ_INT(p.worker, 1);
    CHECK_EQ_INT(p.count, 5);
    w[0].inflight = w[1].inflight = 8;
    p = plan(8, 100, 1, 10, 0, w, 2);
    CHECK_EQ_INT(p.worker, -1);
}

TEST(lone_busy_worker_gets_one_full_batch_more)
{
    struct batcher_worker w[1] = {{1, 1}};
    struct batcher_view v = view(1, 0, 0, 5, 0, w, 1);
    struct batcher_plan p;
    batcher_plan(&v, &p);
    CHECK_EQ_INT(p.worker, 0);
    CHECK_EQ_INT(p.count, 1);
    w[0].inflight = 2; /* not a third batch */
    batcher_plan(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    w[0].inflight = 8; /* never a partial one, even after maxBatchDelay */
    v = view(8, 5, 0, 7, 10000, w, 1);
    batcher_plan(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
    w[0].ready = 0; /* nor to a worker that is not ready */
    w[0].inflight = 0;
    v = view(1, 0, 0, 5, 0, w, 1);
    batcher_plan(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
}

TEST(busy_worker_of_a_pool_gets_nothing_while_another_loads)
{
    struct batcher_worker w[2] = {{1, 1}, {0, 0}}; /* the loading one may be idle first */
    struct batcher_view v = view(1, 0, 0, 5, 0, w, 2);
    struct batcher_plan p;
    batcher_plan(&v, &p);
    CHECK_EQ_INT(p.worker, -1);
}

int main(void)
{
    RUN(idle_worker_gets_a_full_batch);
    RUN(partial_batch_waits_for_max_batch_delay);
    RUN(lone_busy_worker_gets_one_full_batch_more);
    RUN(busy_workers_of_a_pool_get_nothing);
    RUN(continuous_worker_is_topped_up);
    return tap_done();
}
