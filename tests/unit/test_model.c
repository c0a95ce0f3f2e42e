/* The registry and the dispatcher (frontend/core/model.c) against fake workers: where batches go,
 * how long a partial batch waits, how idle workers share a short queue, what a full queue or a
 * cancel does, and what a worker's death does to the requests it held. */
#include "core_fake.h"

TEST(dispatch_goes_to_the_first_idle_worker)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.workers = 2});
    struct rec r[2];
    struct job *a = rec_job(&r[0], "a", "wait:1500");
    struct job *b = rec_job(&r[1], "b", NULL);
    CHECK_EQ_INT(model_submit(m, a), 0);
    CHECK_EQ_INT(model_submit(m, b), 0);
    /* b does not wait behind a: the other worker takes it at once (which worker was ready
     * first depends on the machine's load) */
    CHECK(run_until(rec_done, &r[1], 1000));
    CHECK(!rec_done(&r[0]));
    CHECK_STR(r[1].body, "ok:b");
    /* each fake worker logs what it got from its own process: wait for a's line too */
    CHECK(run_until(log_has_cond, " I a", 1000));
    CHECK((log_has("w9000 I a") && log_has("w9001 I b")) ||
          (log_has("w9001 I a") && log_has("w9000 I b")));
    CHECK(run_until(rec_done, &r[0], 4000));
    CHECK_STR(r[0].body, "ok:a");
    core_teardown();
}

TEST(partial_batch_waits_for_max_batch_delay_full_one_goes_at_once)
{
    core_setup();
    struct model *m =
        fake_model(&(struct fake_model_opts){.batch_size = 4, .max_batch_delay_ms = 300});
    struct rec r[4];
    int64_t t0 = ts_now_us();
    struct job *a = rec_job(&r[0], "a", NULL);
    CHECK_EQ_INT(model_submit(m, a), 0);
    CHECK(run_until(rec_done, &r[0], 2000));
    int64_t waited = ts_now_us() - t0;
    CHECK(waited >= 280000); /* alone: sent when the delay ran out */
    CHECK(log_has("w9000 I a\n"));

    t0 = ts_now_us();
    const char *names[] = {"p", "q", "r", "s"};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(model_submit(m, rec_job(&r[i], names[i], NULL)), 0);
    CHECK(run_until(rec_done, &r[3], 2000));
    CHECK(ts_now_us() - t0 < 200000); /* full: no wait */
    CHECK(log_has("w9000 I p q r s\n"));
    core_teardown();
}

/* Jobs that fill both workers of a two-worker pool at batchSize 1: each worker holds up to four
 * batches (its current one and three in its socket, batcher.c), so the next job is queued. */
#define FILL 8

static void submit_fillers(struct model *m, struct rec *r, struct job **keep, const char *how)
{
    char t[16];
    for (int i = 0; i < FILL; i++) {
        snprintf(t, sizeof(t), "x%d", i);
        struct job *j = rec_job(&r[i], t, how);
        CHECK_EQ_INT(model_submit(m, j), 0);
        if (keep)
            keep[i] = j;
    }
    CHECK_EQ_INT(m->queue_len, 0);
}

TEST(full_queue_and_no_worker_are_refused)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.queue_max = 2, .workers = 2});
    struct rec r[FILL + 3];
    struct job *j[FILL + 3];
    submit_fillers(m, r, j, "hang"); /* run (hang) or wait in the workers' sockets */
    for (int i = FILL; i < FILL + 3; i++)
        j[i] = rec_job(&r[i], "h", "hang");
    CHECK_EQ_INT(model_submit(m, j[FILL]), 0);
    CHECK_EQ_INT(model_submit(m, j[FILL + 1]), 0);
    CHECK_EQ_INT(m->queue_len, 2);
    CHECK_EQ_INT(model_submit(m, j[FILL + 2]), TS_E_QUEUE_FULL);
    job_unref(j[FILL + 2]);
    struct submit_error e;
    struct rec r5;
    struct job *k = rec_job(&r5, "k", NULL);
    CHECK_EQ_INT(model_submit_request(m, k, &e), TS_E_QUEUE_FULL);
    CHECK_EQ_INT(e.status, 503);
    CHECK(strstr(e.msg, "job queue is full: 2 requests queued") != NULL);
    job_unref(k);
    for (int i = 0; i < FILL + 2; i++) {
        job_cancel(j[i]);
        job_unref(j[i]);
    }
    worker_pool_scale(&m->pool, 0);
    struct rec r6;
    struct job *n = rec_job(&r6, "n", NULL);
    CHECK_EQ_INT(model_submit(m, n), TS_E_NO_WORKER);
    job_unref(n);
    core_teardown();
}

TEST(cancel_while_queued_is_silent_and_frees_the_slot)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.workers = 2});
    struct rec r[FILL + 2];
    submit_fillers(m, r, NULL, "wait:200");
    struct job *b = rec_job(&r[FILL], "b", NULL);
    struct job *c = rec_job(&r[FILL + 1], "c", NULL);
    CHECK_EQ_INT(model_submit(m, b), 0);
    CHECK_EQ_INT(model_submit(m, c), 0);
    CHECK_EQ_INT(m->queue_len, 2);
    job_cancel(b);
    job_unref(b);
    CHECK_EQ_INT(m->queue_len, 1);
    CHECK(run_until(rec_done, &r[FILL + 1], 2000));
    CHECK_STR(r[FILL + 1].body, "ok:c");
    CHECK_EQ_INT(r[FILL].frames + r[FILL].errors, 0); /* a cancelled job's sink is never called */
    CHECK(!log_has(" b\n"));                          /* it never reached a worker */
    core_teardown();
}

TEST(cancel_while_running_tells_the_worker_and_frees_the_slot)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.workers = 2});
    struct rec r[FILL + 1];
    struct job *j[FILL];
    submit_fillers(m, r, j, "hang"); /* x0 runs on w9000, x1 on w9001, the rest wait behind */
    CHECK(run_until(log_has_cond, "w9000 I x0", 2000));
    CHECK_EQ_INT(model_submit(m, rec_job(&r[FILL], "b", NULL)), 0);
    CHECK_EQ_INT(m->queue_len, 1);
    job_cancel(j[0]);
    job_unref(j[0]);
    CHECK(run_until(rec_done, &r[FILL], 2000)); /* b took the freed slot */
    CHECK(log_has("w9000 C x0") && log_has("w9000 I b"));
    CHECK_EQ_INT(r[0].frames + r[0].errors, 0);
    core_teardown(); /* fails the hanging ones: their sinks drop the last references */
}

TEST(worker_death_mid_batch_fails_the_batch_and_respawns)
{
    core_setup();
    struct model *m =
        fake_model(&(struct fake_model_opts){.batch_size = 2, .max_batch_delay_ms = 200});
    struct rec r[2];
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "a", "hang")), 0);
    CHECK_EQ_INT(model_submit(m, rec_job(&r[1], "b", "die")), 0);
    CHECK(run_until(both_done, r, 3000));
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(r[i].errors, 1);
        CHECK_EQ_INT(r[i].status, 500);
        CHECK(strstr(r[i].err, "Worker died") != NULL);
    }
    /* respawned, and serving */
    CHECK(run_until(workers_ready, m, 5000));
    struct rec r3;
    CHECK_EQ_INT(model_submit(m, rec_job(&r3, "c", NULL)), 0);
    CHECK(run_until(rec_done, &r3, 2000));
    CHECK_STR(r3.body, "ok:c");
    core_teardown();
}

TEST(continuous_worker_gets_new_requests_while_others_stream)
{
    core_setup();
    struct model *m =
        fake_model(&(struct fake_model_opts){.handler = "fake-continuous", .batch_size = 4});
    CHECK(m->pool.continuous);
    struct rec r[2];
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "long", "stream:10:50")), 0);
    CHECK(run_until(log_has_cond, "w9000 I long", 2000));
    run_for(60);
    /* joins at once (top-up), not after the 500 ms stream */
    CHECK_EQ_INT(model_submit(m, rec_job(&r[1], "short", NULL)), 0);
    CHECK(run_until(rec_done, &r[1], 300));
    CHECK(!rec_done(&r[0]));
    CHECK(run_until(rec_done, &r[0], 3000));
    CHECK_EQ_INT(r[0].frames, 10);
    CHECK(strstr(r[0].body, "long:1|long:2|") == r[0].body);
    core_teardown();
}

/* issue 37: 8 jobs, batchSize 8, 2 idle workers: 4 each, at once (before, the first worker took
 * all 8 and the second waited) */
TEST(idle_workers_share_a_short_queue)
{
    core_setup();
    struct model *m = fake_model(
        &(struct fake_model_opts){.workers = 2, .batch_size = 8, .max_batch_delay_ms = 300});
    struct rec r[8];
    static const char *const t[8] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    int64_t t0 = ts_now_us();
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(model_submit(m, rec_job(&r[i], t[i], NULL)), 0);
    for (int i = 0; i < 8; i++)
        CHECK(run_until(rec_done, &r[i], 2000));
    CHECK(ts_now_us() - t0 < 250000); /* neither share waited for maxBatchDelay */
    CHECK((log_has("w9000 I a b c d\n") && log_has("w9001 I e f g h\n")) ||
          (log_has("w9001 I a b c d\n") && log_has("w9000 I e f g h\n")));
    core_teardown();
}

int main(void)
{
    tbase_make("test_model");
    RUN(dispatch_goes_to_the_first_idle_worker);
    RUN(partial_batch_waits_for_max_batch_delay_full_one_goes_at_once);
    RUN(full_queue_and_no_worker_are_refused);
    RUN(cancel_while_queued_is_silent_and_frees_the_slot);
    RUN(cancel_while_running_tells_the_worker_and_frees_the_slot);
    RUN(worker_death_mid_batch_fails_the_batch_and_respawns);
    RUN(continuous_worker_gets_new_requests_while_others_stream);
    RUN(idle_workers_share_a_short_queue);
    tbase_remove();
    return tap_done();
}
