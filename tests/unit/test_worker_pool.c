/* The worker processes and their connections (frontend/core/worker_pool.c) against fake
 * workers: death mid-stream, a death behind which batches were pipelined, a batch that never
 * reached a dead worker, an answer still unread when the death is handled, a worker that stops
 * answering, the step times reported, one that cannot
 * load, a respawn that cannot start the process, a scale-down under load, a paused stream, and
 * the GPU each worker's load frame names. */
#include <sys/wait.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "core_fake.h"

TEST(death_mid_stream_fails_the_stream_after_its_frames)
{
    core_setup();
    struct model *m =
        fake_model(&(struct fake_model_opts){.handler = "fake-continuous", .batch_size = 2});
    struct rec r;
    CHECK_EQ_INT(model_submit(m, rec_job(&r, "s", "die-after:3")), 0);
    CHECK(run_until(rec_done, &r, 3000));
    CHECK_EQ_INT(r.frames, 3); /* what came before the death reached the client */
    CHECK_STR(r.body, "s:1|s:2|s:3");
    CHECK_EQ_INT(r.errors, 1);
    CHECK_EQ_INT(r.status, 500);
    CHECK(strstr(r.err, "Worker died") != NULL);
    CHECK(run_until(workers_ready, m, 5000)); /* respawned */
    core_teardown();
}

TEST(a_worker_that_stops_answering_is_killed_after_response_timeout)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.response_timeout_s = 1});
    struct rec r;
    int64_t t0 = ts_now_us();
    CHECK_EQ_INT(model_submit(m, rec_job(&r, "h", "hang")), 0);
    CHECK(run_until(rec_done, &r, 4000));
    CHECK(ts_now_us() - t0 >= 900000);
    CHECK_EQ_INT(r.status, 500);
    CHECK_STR(r.err, "Worker did not respond in given time");
    CHECK(run_until(workers_ready, m, 5000));
    struct rec r2;
    CHECK_EQ_INT(model_submit(m, rec_job(&r2, "n", NULL)), 0);
    CHECK(run_until(rec_done, &r2, 2000));
    CHECK_STR(r2.body, "ok:n");
    core_teardown();
}

/* The batcher sizes a busy worker's pipeline from this (batcher.c). */
TEST(the_pool_averages_the_step_times_its_workers_report)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    CHECK_EQ_INT((int)m->pool.step_us, 0); /* none reported yet */
    static const struct {
        const char *how;
        int avg;
    } c[] = {
        {"step:800", 800},   /* the first is taken as it is */
        {"step:1600", 1600}, /* so is a longer one: the depth shrinks at once */
        {NULL, 1600},        /* an answer without a step time leaves it */
        {"step:0", 1400},    /* a shorter one moves it by an eighth: (7 * 1600 + 1 + 4) / 8 */
        {"step:800", 1325},  /* (7 * 1400 + 800 + 4) / 8 */
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct rec r;
        CHECK_EQ_INT(model_submit(m, rec_job(&r, "s", c[i].how)), 0);
        CHECK(run_until(rec_done, &r, 3000));
        CHECK_STR(r.body, "ok:s");
        CHECK_EQ_INT((int)m->pool.step_us, c[i].avg);
    }
    core_teardown();
}

/* A death fails the batch the worker was running, not the batches pipelined behind it. */
TEST(a_death_fails_the_running_batch_and_requeues_the_ones_behind_it)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0}); /* batchSize 1 */
    struct rec r[4];
    static const char *const t[4] = {"a", "b", "c", "d"};
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "a", "hang")), 0); /* the running one */
    for (int i = 1; i < 4; i++) /* pipelined behind it: answered 300 ms after they arrive */
        CHECK_EQ_INT(model_submit(m, rec_job(&r[i], t[i], "wait:300")), 0);
    struct worker *w = TAILQ_FIRST(&m->pool.workers);
    CHECK_EQ_INT(w->n_inflight, 4);
    char line[32];
    snprintf(line, sizeof(line), "w%d I d", w->id);
    CHECK(run_until(log_has_cond, line, 3000)); /* the worker has all four */
    kill(w->pid, SIGKILL);
    CHECK(run_until(rec_done, &r[0], 3000));
    CHECK_EQ_INT(r[0].status, 500);
    CHECK(strstr(r[0].err, "Worker died") != NULL);
    for (int i = 1; i < 4; i++) {
        CHECK(run_until(rec_done, &r[i], 5000)); /* by the respawned worker */
        CHECK_EQ_INT(r[i].errors, 0);
        char want[8];
        snprintf(want, sizeof(want), "ok:%s", t[i]);
        CHECK_STR(r[i].body, want);
    }
    core_teardown();
}

/* the model's worker is a new process, loaded */
static pid_t respawned_from;
static int respawned(void *arg)
{
    struct worker *w = TAILQ_FIRST(&((struct model *)arg)->pool.workers);
    return w->pid > 0 && w->pid != respawned_from && worker_takes_jobs(w);
}

/* A worker that kept its progress page dies: the jobs that reached its handler fail once, the
 * ones it had finished (their answers were held back and died with it) as well as the one it
 * was running, and only the one it had not started goes back to the queue. Issue 34: a and b
 * used to go back too, and ran a second time on the next worker. Without the page, a would
 * fail as the running one, and c would go to the next worker and kill it too. */
TEST(a_job_that_reached_the_handler_fails_once_and_only_unstarted_ones_go_back)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0}); /* batchSize 1 */
    struct rec r[4];
    static const char *const t[4] = {"a", "b", "c", "d"};
    /* all four reach the worker in one send; c claims a and b finished and itself running */
    static const char *const how[4] = {"wait:300", "wait:300", "progress-die:3:2", "wait:300"};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(model_submit(m, rec_job(&r[i], t[i], how[i])), 0);
    CHECK_EQ_INT(TAILQ_FIRST(&m->pool.workers)->n_inflight, 4);
    for (int i = 0; i < 4; i++)
        CHECK(run_until(rec_done, &r[i], 5000));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(r[i].frames, 0);
        CHECK_EQ_INT(r[i].status, 500);
        CHECK(strstr(r[i].err, "Worker died") != NULL);
    }
    CHECK_EQ_INT(r[3].errors, 0); /* by the respawned worker */
    CHECK_STR(r[3].body, "ok:d");
    char *log = fake_log_text(); /* the respawned worker (the same id) got d alone */
    const char *again = strstr(log, "L fake");
    again = again ? strstr(again + 1, "L fake") : NULL;
    CHECK(again != NULL && strstr(again, "I d\n") != NULL);
    CHECK(again && !strstr(again, "I a") && !strstr(again, "I b") && !strstr(again, "I c"));
    const char *first = strstr(log, "exit on c"); /* c did not kill the next worker too */
    CHECK(first != NULL && strstr(first + 1, "exit on c") == NULL);
    free(log);
    core_teardown();
}

/* A page that lies (handler code can write to it): the job that kills each worker claims that
 * nothing had started, so it goes back to the queue, but 3 times at most; then it fails. */
TEST(a_job_goes_back_to_the_queue_three_times_at_most)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    struct rec r;
    CHECK_EQ_INT(model_submit(m, rec_job(&r, "x", "progress-die:0:0")), 0);
    /* each death doubles the back-off: 0, 250, 500 ms (these workers never answered) */
    CHECK(run_until(rec_done, &r, 5000));
    CHECK_EQ_INT(r.status, 500);
    CHECK(strstr(r.err, "Worker died") != NULL);
    char *log = fake_log_text();
    int deaths = 0;
    for (const char *p = log; (p = strstr(p, "exit on x")); p++)
        deaths++;
    CHECK_EQ_INT(deaths, 4);
    free(log);
    core_teardown();
}

/* A request that kills the worker after its handler finished (its answer never left) fails at
 * once instead of going back to the queue and killing 3 more workers. */
TEST(a_job_whose_handler_finished_is_not_run_again)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    struct rec r;
    CHECK_EQ_INT(model_submit(m, rec_job(&r, "x", "progress-die:1:1")), 0);
    CHECK(run_until(rec_done, &r, 5000));
    CHECK_EQ_INT(r.status, 500);
    CHECK(strstr(r.err, "Worker died") != NULL);
    run_for(300);
    char *log = fake_log_text();
    const char *first = strstr(log, "exit on x");
    CHECK(first != NULL && strstr(first + 1, "exit on x") == NULL);
    free(log);
    core_teardown();
}

/* A worker that answered a request and is then killed is respawned at once, however often:
 * the back-off is for workers that cannot stay up. Before, each death doubled it (0, 250, 500,
 * 1000, 2000, 4000 ms), and a kill loop left the model down for up to 30 s after it. */
TEST(a_worker_that_answered_is_respawned_at_once)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    for (int i = 0; i < 6; i++) {
        struct rec r;
        CHECK_EQ_INT(model_submit(m, rec_job(&r, "x", NULL)), 0);
        CHECK(run_until(rec_done, &r, 3000));
        CHECK_STR(r.body, "ok:x");
        respawned_from = TAILQ_FIRST(&m->pool.workers)->pid;
        int64_t t0 = ts_now_us();
        kill(respawned_from, SIGKILL);
        CHECK(run_until(respawned, m, 5000));
        CHECK(ts_now_us() - t0 < 1000000); /* the 5th would wait 2 s, the 6th 4 s */
    }
    core_teardown();
}

/* A worker that answers and dies at once: its answer frees it, and the loop dispatches the
 * batch queued behind to it before it sees the death. That batch never reached the worker, so
 * it goes back to the queue instead of failing as the one the worker was running. */
TEST(a_batch_that_never_reached_a_dead_worker_goes_back_to_the_queue)
{
    core_setup();
    /* batchSize 2, maxBatchDelay 0: a lone job leaves at once, and a partial batch waits for an
     * idle worker instead of being pipelined behind a busy one */
    struct model *m = fake_model(&(struct fake_model_opts){.batch_size = 2});
    struct worker *w = TAILQ_FIRST(&m->pool.workers);
    pid_t pid = w->pid;
    struct rec r[2];
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "a", "wait-die:200")), 0);
    char line[32];
    snprintf(line, sizeof(line), "w%d I a", w->id);
    CHECK(run_until(log_has_cond, line, 3000));
    CHECK_EQ_INT(model_submit(m, rec_job(&r[1], "b", NULL)), 0);
    CHECK_EQ_INT(w->n_inflight, 1); /* b waits in the queue */
    /* the loop first looks again once the worker is dead (not reaped): its answer, its EOF and
     * its SIGCHLD all wait for the same turn */
    siginfo_t si;
    CHECK_EQ_INT(waitid(P_PID, pid, &si, WEXITED | WNOWAIT), 0);
    CHECK(run_until(both_done, r, 5000));
    CHECK_EQ_INT(r[0].errors, 0);
    CHECK_STR(r[0].body, "ok:a");
    CHECK_EQ_INT(r[1].errors, 0); /* served by the respawned worker */
    CHECK_STR(r[1].body, "ok:b");
    core_teardown();
}

/* An answer written just before the death reaches its client. Here the loop sees the socket's
 * last bytes before the SIGCHLD; the test below forces the other order. */
TEST(an_answer_written_before_the_death_is_delivered)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    for (int i = 0; i < 4; i++) { /* it answered: each respawn is at once */
        struct rec r;
        respawned_from = TAILQ_FIRST(&m->pool.workers)->pid;
        CHECK_EQ_INT(model_submit(m, rec_job(&r, "x", "answer-die")), 0);
        CHECK(run_until(rec_done, &r, 3000));
        CHECK_EQ_INT(r.errors, 0);
        CHECK_STR(r.body, "ok:x");
        CHECK(run_until(respawned, m, 5000));
    }
    core_teardown();
}

/* the worker's batch has left the frontend: in the socket, nothing waiting behind it */
static int batch_in_socket(void *arg)
{
    struct worker *w = arg;
    return w->n_inflight == 1 && w->conn.unsent == 0 && w->conn.bev &&
           evbuffer_get_length(bufferevent_get_output(w->conn.bev)) == 0;
}

/* The other order: the SIGCHLD is handled while the dead worker's answer still waits, unread, in
 * its socket. reap must read it first (read_last_answers), so the request is answered instead
 * of failing with "Worker died". Once the batch has left, the test stops the loop from reading
 * the worker's socket, so only the SIGCHLD can end the wait. */
TEST(an_answer_unread_when_the_death_is_handled_is_delivered)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){0});
    struct worker *w = TAILQ_FIRST(&m->pool.workers);
    pid_t pid = w->pid;
    struct rec r;
    CHECK_EQ_INT(model_submit(m, rec_job(&r, "x", "answer-die")), 0);
    CHECK(run_until(batch_in_socket, w, 3000));
    CHECK_EQ_INT(bufferevent_disable(w->conn.bev, EV_READ), 0);
    siginfo_t si;
    CHECK_EQ_INT(waitid(P_PID, pid, &si, WEXITED | WNOWAIT), 0); /* answered, then exited */
    CHECK_EQ_INT(r.final + r.errors, 0);  /* the loop has not read the answer */
    CHECK(run_until(rec_done, &r, 3000)); /* only the SIGCHLD can end this wait */
    CHECK_EQ_INT(r.errors, 0);
    CHECK_STR(r.body, "ok:x");
    core_teardown();
}

static int all_failed(void *arg)
{
    struct model *m = arg;
    struct worker *w;
    int n = 0;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    n += w->state == WORKER_FAILED;
    return n == m->pool.n_workers && n > 0;
}

TEST(a_worker_that_cannot_load_is_not_respawned)
{
    core_setup();
    struct model *m = model_new();
    m->name = xstrdup("bad");
    m->version = xstrdup("1.0");
    m->url = xstrdup("bad.mar");
    m->dir = xstrdup("/nonexistent");
    m->handler = xstrdup("fake-fail");
    model_config_defaults(&m->mc);
    m->pool.batch_size = 1;
    m->pool.response_timeout_s = m->pool.startup_timeout_s = 30;
    m->queue_max = 10;
    char err[128];
    CHECK_EQ_INT(model_add(m, err, sizeof(err)), 0);
    worker_pool_scale(&m->pool, 1);
    CHECK(run_until(all_failed, m, 5000));
    CHECK_EQ_INT(model_workers_alive(m), 0);
    run_for(300);
    char *log = fake_log_text();
    CHECK(strstr(log, "w9000 L fake-fail") && !strstr(log, "w9001"));
    free(log);
    struct rec r;
    struct job *j = rec_job(&r, "x", NULL);
    CHECK_EQ_INT(model_submit(m, j), TS_E_NO_WORKER);
    job_unref(j);
    core_teardown();
}

/* fake_exec, or the next exec_fails spawns fail with exec_errno as posix_spawn does (ENOENT: the
 * worker binary is gone; EAGAIN: no process to be had for now) */
static int exec_fails, exec_errno;
static int maybe_exec(const struct worker *w, int fd, pid_t *pid, void *arg)
{
    if (exec_fails > 0) {
        exec_fails--;
        return exec_errno;
    }
    return fake_exec(w, fd, pid, arg);
}

/* A worker runs "a" (hung) with "b" pipelined behind it; it is killed, and its next `fails`
 * spawns fail with `err`. r[0] gets the death's 500; b went back to the queue. */
static struct model *kill_with_spawns_failing(struct rec r[2], const char *b_how, int fails,
                                              int err)
{
    worker_pool_set_exec(maybe_exec, NULL);
    exec_fails = 0;
    struct model *m = fake_model(&(struct fake_model_opts){0}); /* batchSize 1 */
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "a", "hang")), 0);
    CHECK_EQ_INT(model_submit(m, rec_job(&r[1], "b", b_how)), 0);
    struct worker *w = TAILQ_FIRST(&m->pool.workers);
    CHECK(run_until(log_has_cond, "I b", 3000));
    exec_fails = fails, exec_errno = err;
    kill(w->pid, SIGKILL);
    CHECK(run_until(rec_done, &r[0], 3000));
    CHECK_EQ_INT(r[0].status, 500);
    return m;
}

/* A respawn that cannot start the worker process fails what waits for the model with 503:
 * nothing else would ever serve it. */
TEST(a_respawn_that_cannot_start_the_worker_fails_the_queue)
{
    core_setup();
    struct rec r[2];
    struct model *m = kill_with_spawns_failing(r, "wait:2000", 1000, ENOENT);
    CHECK(run_until(rec_done, &r[1], 3000));
    CHECK_EQ_INT(r[1].status, 503);
    CHECK(strstr(r[1].err, "its worker process could not be started") != NULL);
    CHECK(all_failed(m));
    struct rec r2;
    struct job *j = rec_job(&r2, "c", NULL);
    CHECK_EQ_INT(model_submit(m, j), TS_E_NO_WORKER);
    job_unref(j);
    exec_fails = 0;
    core_teardown();
}

/* A spawn that fails for want of processes or memory is tried again after a second. */
TEST(a_spawn_short_of_processes_is_retried)
{
    core_setup();
    struct rec r[2];
    kill_with_spawns_failing(r, "wait:300", 2, EAGAIN);
    CHECK(run_until(rec_done, &r[1], 6000)); /* by the third spawn, two seconds later */
    CHECK_EQ_INT(r[1].errors, 0);
    CHECK_STR(r[1].body, "ok:b");
    CHECK_EQ_INT(exec_fails, 0);
    core_teardown();
}

TEST(scale_down_lets_the_worker_answer_what_it_holds)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){.workers = 2});
    struct rec r[2];
    CHECK_EQ_INT(model_submit(m, rec_job(&r[0], "a", "wait:300")), 0);
    CHECK_EQ_INT(model_submit(m, rec_job(&r[1], "b", "wait:300")), 0);
    CHECK(run_until(log_has_cond, "w9001 I b", 2000));
    worker_pool_scale(&m->pool, 1);
    CHECK(run_until(both_done, r, 3000));
    CHECK_STR(r[0].body, "ok:a");
    CHECK_STR(r[1].body, "ok:b");
    CHECK_EQ_INT(r[0].errors + r[1].errors, 0);
    run_for(200);
    CHECK_EQ_INT(m->pool.n_workers, 1);
    core_teardown();
}

TEST(a_worker_whose_streams_are_all_paused_is_not_timed_out)
{
    core_setup();
    struct model *m = fake_model(&(struct fake_model_opts){
        .handler = "fake-continuous", .batch_size = 2, .response_timeout_s = 1});
    struct rec r;
    struct job *slow = rec_job(&r, "slow", "stream:20:20");
    job_ref(slow); /* kept to pause it */
    CHECK_EQ_INT(model_submit(m, slow), 0);
    CHECK(run_until(log_has_cond, "I slow", 2000));
    run_for(70);
    job_pause(slow, 1);
    CHECK(run_until(log_has_cond, "P slow", 1000));
    int frames = r.frames;
    run_for(1600);                 /* longer than responseTimeout: it owes no answer while paused */
    CHECK(r.frames <= frames + 1); /* at most one frame was already on its way */
    CHECK_EQ_INT(r.errors, 0);
    job_pause(slow, 0);
    CHECK(run_until(rec_done, &r, 3000));
    CHECK_EQ_INT(r.errors, 0);
    CHECK_EQ_INT(r.frames, 20);
    CHECK(!log_has("w9001")); /* never killed and respawned */
    job_unref(slow);
    core_teardown();
}

struct respawn_wait {
    struct model *m;
    struct worker *w;
    pid_t old;
};

static int respawned_on_gpu(void *arg)
{
    struct respawn_wait *rw = arg;
    return rw->w->pid > 0 && rw->w->pid != rw->old && workers_ready(rw->m);
}

/* The load frames' gpu_id: one counter across models (the first worker of a 2-GPU server gets
 * GPU 1, as TorchServe's), a model's deviceIds on its own counter, deviceType cpu -1; a
 * respawned worker keeps its GPU. */
TEST(workers_get_their_gpu_in_the_load_frame)
{
    core_setup();
    srv->n_gpu = 2;
    struct model *a = fake_model(&(struct fake_model_opts){.name = "a", .workers = 2});
    CHECK(log_has("w9000 L fake gpu=1\n"));
    CHECK(log_has("w9001 L fake gpu=0\n"));
    struct model *b = fake_model(&(struct fake_model_opts){.name = "b"});
    CHECK(log_has("w9002 L fake gpu=1\n"));
    static const int ids[] = {0};
    fake_model(&(struct fake_model_opts){.name = "c",
                                         .workers = 2,
                                         .device_type = MC_DEVICE_GPU,
                                         .device_ids = ids,
                                         .n_device_ids = 1});
    CHECK(log_has("w9003 L fake gpu=0\n"));
    CHECK(log_has("w9004 L fake gpu=0\n"));
    fake_model(&(struct fake_model_opts){.name = "d", .device_type = MC_DEVICE_CPU});
    CHECK(log_has("w9005 L fake gpu=-1\n"));
    worker_pool_scale(&b->pool, 2); /* the server's counter went on from b's first worker */
    CHECK(run_until(workers_ready, b, 5000));
    CHECK(log_has("w9006 L fake gpu=0\n"));
    /* w9001 dies and is respawned on its GPU */
    struct respawn_wait rw = {a, TAILQ_LAST(&a->pool.workers, worker_list), 0};
    CHECK_EQ_INT(rw.w->id, 9001);
    rw.old = rw.w->pid;
    kill(rw.old, SIGKILL);
    CHECK(run_until(respawned_on_gpu, &rw, 5000));
    char *t = fake_log_text();
    int loads = 0;
    for (const char *p = t; (p = strstr(p, "w9001 L ")); p++, loads++)
        CHECK(!strncmp(p, "w9001 L fake gpu=0\n", 19));
    CHECK_EQ_INT(loads, 2);
    free(t);
    core_teardown();
}

int main(void)
{
    tbase_make("test_worker_pool");
    RUN(death_mid_stream_fails_the_stream_after_its_frames);
    RUN(a_worker_that_stops_answering_is_killed_after_response_timeout);
    RUN(the_pool_averages_the_step_times_its_workers_report);
    RUN(a_death_fails_the_running_batch_and_requeues_the_ones_behind_it);
    RUN(a_job_that_reached_the_handler_fails_once_and_only_unstarted_ones_go_back);
    RUN(a_job_goes_back_to_the_queue_three_times_at_most);
    RUN(a_job_whose_handler_finished_is_not_run_again);
    RUN(a_worker_that_answered_is_respawned_at_once);
    RUN(an_answer_written_before_the_death_is_delivered);
    RUN(an_answer_unread_when_the_death_is_handled_is_delivered);
    RUN(a_batch_that_never_reached_a_dead_worker_goes_back_to_the_queue);
    RUN(a_worker_that_cannot_load_is_not_respawned);
    RUN(a_respawn_that_cannot_start_the_worker_fails_the_queue);
    RUN(a_spawn_short_of_processes_is_retried);
    RUN(scale_down_lets_the_worker_answer_what_it_holds);
    RUN(a_worker_whose_streams_are_all_paused_is_not_timed_out);
    RUN(workers_get_their_gpu_in_the_load_frame);
    tbase_remove();
    return tap_done();
}
