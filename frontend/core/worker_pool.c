/*
 * worker_pool: worker processes and their sockets.
 *
 * Life of a worker: spawn (posix_spawn, socketpair end on fd 3) -> STARTING (load frame sent,
 * startupTimeout armed) -> READY (load reply 200) -> ... -> death. Death is seen twice: the
 * socket hits EOF (we SIGKILL to be sure) and SIGCHLD reaps the pid. The in-flight jobs are
 * failed at reap time, when the exit status is known: 507 if the kernel's OOM killer took it
 * (its oom_kill counter moved while the worker lived), 500 "Worker died." otherwise. A worker is
 * then respawned after a bounded exponential back-off, unless it exited with code 2 (fatal:
 * bad model or handler), or it was being stopped.
 *
 * A model being unregistered detaches its workers (group = NULL); they are freed when reaped.
 * Everything the pool has to say upward goes through the group's ops (worker_pool.h).
 */
#include "worker_pool.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "worker_answer.h"
#include "worker_exec.h"
#include "worker_log.h"

#define BACKOFF_MAX_MS 30000
/* times a job that never reached a handler may go back to the queue after a worker's death
 * (give_back) */
#define GIVE_BACK_MAX 3

static struct event *ev_sigchld;
static TAILQ_HEAD(, worker) all_workers = TAILQ_HEAD_INITIALIZER(all_workers);

static void worker_spawn(struct worker *w);
static void on_timer(evutil_socket_t fd, short what, void *arg);

const char *worker_state_name(const struct worker *w)
{
    return w->state == WORKER_READY ? "READY" : "UNLOADING";
}

int worker_pool_alive(const struct worker_group *g)
{
    int n = 0;
    const struct worker *w;
    TAILQ_FOREACH(w, &g->workers, link)
    if (w->state == WORKER_STARTING || w->state == WORKER_READY || w->state == WORKER_BACKOFF)
        n++;
    return n;
}

int worker_pool_ready(const struct worker_group *g)
{
    int n = 0;
    const struct worker *w;
    TAILQ_FOREACH(w, &g->workers, link)
    if (w->state == WORKER_READY)
        n++;
    return n;
}

static void arm_timer(struct worker *w, int64_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(w->timer, &tv);
}

static void inflight_remove(struct worker *w, struct job *j)
{
    TAILQ_REMOVE(&w->inflight, j, link);
    w->n_inflight--;
    if (j->paused) {
        j->paused = 0;
        w->n_paused--;
    }
}

static void fail_inflight(struct worker *w, int status, const char *type, const char *msg)
{
    struct job *j;
    while ((j = TAILQ_FIRST(&w->inflight))) {
        inflight_remove(w, j);
        job_fail(j, status, type, msg);
    }
}

/* A dead worker's jobs that never reached its handler go back to the group's owner, so that
 * its death fails only what it had started, as in TorchServe, however many batches were
 * pipelined behind it (batcher.c). A request that reached a handler is never run twice: it
 * fails, once, with the death's reason, whether the handler was still running it or had
 * finished it and the answer died with the worker (held back while its next step ran,
 * backend/worker/worker.c, or refused for being over max_response_size). Running it again would
 * repeat whatever the handler did (a charge, a write, a state update) and, when the request is
 * what kills the worker, kill the next worker too. Its progress page (otf_progress) tells which
 * requests were handed to a handler (those below `started`). A worker that did not keep the
 * page (a fake one in the unit tests) holds nothing back, and steps through what it holds in the
 * order it was sent, at most batchSize requests a step: then all but the first batchSize of its
 * unanswered jobs had not started, nor had the last ones, whose batches never reached it
 * (worker_conn.unsent): a worker that answers and dies frees itself for the next batch, which
 * the loop may dispatch to it before it sees the death. A job that streamed a frame or was
 * paused had started, so it fails wherever it is. A continuous handler runs everything it holds
 * at once, and a sequence's job stays with its sequence: theirs all fail. So does a job already
 * given back GIVE_BACK_MAX times (never started, but each of those workers died): whatever the
 * page says (the handler's code can write to it), no request takes workers down without end.
 * Returns how many went back. */
static int give_back(struct worker *w)
{
    struct worker_group *g = w->group;
    if (!g || !g->ops->requeue || g->continuous || w->state == WORKER_STOPPING)
        return 0;
    struct job **back = xmalloc(sizeof(*back) * (size_t)w->n_inflight);
    int n = 0, running = g->batch_size > 0 ? g->batch_size : 1;
    if (running > w->n_inflight - w->conn.unsent)
        running = w->n_inflight - w->conn.unsent;
    uint64_t started = 0, finished = 0;
    int kept = worker_progress_read(&w->progress, &started, &finished);
    struct job *j, *tmp;
    TAILQ_FOREACH_SAFE(j, &w->inflight, link, tmp)
    {
        if (j->seq)
            continue;
        if (kept ? j->wseq < started : running-- > 0)
            continue; /* it reached a handler */
        if (j->frames > 0 || j->paused || j->given_back >= GIVE_BACK_MAX)
            continue;
        j->given_back++;
        inflight_remove(w, j);
        j->worker = NULL;
        j->dispatched_us = 0;
        j->worker_lost = 0;
        back[n++] = j;
    }
    if (n > 0)
        g->ops->requeue(g, back, n);
    free(back);
    return n;
}

/* Takes the worker out of its group for good (its owner re-pins its sequences). */
static void detach_from_group(struct worker *w)
{
    struct worker_group *g = w->group;
    if (!g)
        return;
    TAILQ_REMOVE(&g->workers, w, link);
    g->n_workers--;
    w->group = NULL;
    g->ops->gone(g, w);
}

static void worker_free(struct worker *w)
{
    worker_out_close(&w->conn);
    worker_progress_close(&w->progress);
    worker_log_free(w->log);
    if (w->timer)
        event_free(w->timer);
    buf_free(&w->out);
    free(w);
}

/* Kills the process; the reaper does the rest. */
static void worker_kill(struct worker *w, const char *reason)
{
    if (!w->kill_reason)
        w->kill_reason = reason;
    worker_out_close(&w->conn);
    if (w->pid > 0)
        kill(w->pid, SIGKILL);
}

/* The first load reply's " torch=V cuda=N" (backend/worker/worker.c): which libtorch the workers
 * run and how many CUDA devices it sees, once in the start-up log (the frontend links neither
 * libtorch nor CUDA). */
static void log_runtime_once(const char *msg)
{
    static int logged;
    const char *t = strstr(msg, " torch="), *c = strstr(msg, " cuda=");
    if (logged || !t || !c)
        return;
    logged = 1;
    int n = atoi(c + 6);
    LOG_INFO("workers: libtorch %.*s, %s%.0d%s", (int)strcspn(t + 7, " "), t + 7,
             n > 0 ? "CUDA available, " : "no CUDA (the models run on the CPU)", n > 0 ? n : 0,
             n > 0 ? " device(s) seen" : "");
}

static void handle_load_reply(struct worker *w, const struct otf_response *r)
{
    struct worker_group *g = w->group;
    char *msg = otf_strdup(r->msg);
    if (r->code != 200) {
        LOG_ERROR("worker %d (model %s) failed to load: %s", w->id, g ? g->name : "-", msg);
        if (g)
            snprintf(g->load_error, sizeof(g->load_error), "%s", msg);
        free(msg);
        return; /* it exits with code 2; the reaper handles it */
    }
    w->state = WORKER_READY;
    w->ready_since_us = ts_now_us();
    evtimer_del(w->timer);
    log_runtime_once(msg);
    if (g) {
        g->load_error[0] = '\0';
        g->continuous = strstr(msg, "continuous=1") != NULL;
        w->load_ms = ts_wall_ms() - w->start_wall_ms;
        LOG_INFO("worker %d (pid %d) loaded model %s %s in %lld ms%s", w->id, (int)w->pid, g->name,
                 g->version, (long long)w->load_ms, g->continuous ? " (continuous batching)" : "");
        g->ops->ready(g, w);
    }
    free(msg);
}

/* What slots() dispatches leaves with the loop turn's other batches (worker_out.c), after this
 * frame's answers are written. Sending the answering worker's batch at once when it had nothing
 * left to run, so that its compute overlaps our reply writing, measured worse: 0.94x at 1 worker,
 * batchSize 1 (docs/performance.md). */
#define ANSWERS_FEW 32 /* a frame of up to this many answers needs no allocation to match them */
static void handle_response(struct worker *w, struct otf_response *r)
{
    w->steps++;
    if (r->code != 200 && r->n_preds == 0) {
        char *msg = otf_strdup(r->msg);
        fail_inflight(w, r->code >= 400 && r->code <= 599 ? r->code : 500,
                      "InternalServerException", msg);
        free(msg);
    }
    struct job *few_jobs[ANSWERS_FEW];
    int few_finals[ANSWERS_FEW];
    struct job **jobs = few_or_alloc(few_jobs, ANSWERS_FEW, r->n_preds, sizeof(*jobs));
    int *finals = few_or_alloc(few_finals, ANSWERS_FEW, r->n_preds, sizeof(*finals));
    for (size_t i = 0; i < r->n_preds; i++) {
        jobs[i] = NULL;
        finals[i] = 0;
    }
    for (size_t i = 0; i < r->n_preds; i++) {
        struct otf_prediction *p = &r->preds[i];
        struct job *j;
        TAILQ_FOREACH(j, &w->inflight, link)
        if (otf_str_eq(p->id, j->id))
            break;
        worker_answer_prepare(w, p, j);
        if (!j)
            continue; /* cancelled: its frames are dropped */
        const struct otf_kv *sn = otf_find_kv(p->headers, p->n_headers, OTF_STREAM_NEXT);
        finals[i] = r->code != 200 || !(sn && otf_str_eq(sn->val, "true"));
        if (finals[i])
            inflight_remove(w, j);
        jobs[i] = j;
    }
    if (w->n_inflight == w->n_paused) /* nothing it is expected to answer */
        evtimer_del(w->timer);
    else if (w->group)
        arm_timer(w, (int64_t)w->group->response_timeout_s * 1000);
    /* a worker scaled down exits once it has answered everything (EOF on its socket) */
    int done_stopping = w->state == WORKER_STOPPING && w->n_inflight == 0;
    if (w->group)
        w->group->ops->slots(w->group);
    for (size_t i = 0; i < r->n_preds; i++) {
        if (!jobs[i])
            continue;
        if (r->code != 200) {
            char *msg = otf_strdup(r->msg);
            job_fail(jobs[i], r->code >= 400 && r->code <= 599 ? r->code : 500,
                     "InternalServerException", msg);
            free(msg);
        } else {
            job_deliver_frame(jobs[i], &r->preds[i], finals[i]);
        }
    }
    free_unless_few(jobs, few_jobs);
    free_unless_few(finals, few_finals);
    if (done_stopping && w->state == WORKER_STOPPING)
        worker_out_close(&w->conn);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct worker *w = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    w->last_io_us = ts_now_us();
    while (w->conn.bev) {
        size_t len = evbuffer_get_length(in);
        if (len == 0)
            break;
        const uint8_t *p = evbuffer_pullup(in, -1);
        struct otf_response r;
        long n = otf_decode_response(p, len, (size_t)srv->cfg.max_response_size, &r);
        if (n == TS_E_INCOMPLETE)
            break;
        if (n < 0) {
            LOG_ERROR("worker %d sent a bad frame: %s", w->id, ts_strerror((int)n));
            worker_kill(w, n == TS_E_TOO_LARGE ? "Worker response exceeds max_response_size "
                                                 "(consider increasing max_response_size)"
                                               : "Worker sent a malformed frame");
            return;
        }
        if (w->state == WORKER_STARTING)
            handle_load_reply(w, &r);
        else
            handle_response(w, &r);
        otf_response_free(&r);
        if (w->conn.bev)
            evbuffer_drain(in, (size_t)n);
    }
    if (w->group)
        w->group->ops->slots(w->group);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct worker *w = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        LOG_DEBUG("worker %d socket closed", w->id);
        worker_kill(w, NULL);
    }
}

static worker_exec_fn *exec_fn = worker_exec_binary;

/* A worker's "[METRICS]" line, to its group's owner */
static void worker_metric_line(void *arg, const char *line, size_t len)
{
    struct worker *w = arg;
    if (w->group && w->group->ops->metric_line)
        w->group->ops->metric_line(w->group, line, len);
}
static void *exec_arg;

void worker_pool_set_exec(worker_exec_fn *fn, void *arg)
{
    exec_fn = fn ? fn : worker_exec_binary;
    exec_arg = arg;
}

static void worker_spawn(struct worker *w)
{
    int sv[2];
    w->kill_reason = NULL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        LOG_ERROR("socketpair: %s", strerror(errno));
        w->state = WORKER_BACKOFF;
        arm_timer(w, 1000);
        return;
    }
    w->oom_kills_at_spawn = oom_kill_count();
    worker_progress_renew(&w->progress);
    w->sent = 0;
    w->steps = 0;
    pid_t pid;
    int rc = exec_fn(w, sv[1], &pid, exec_arg);
    close(sv[1]);
    if (rc != 0) { /* logged by exec_fn */
        close(sv[0]);
        if (rc == EAGAIN || rc == ENOMEM) { /* short of processes or memory: for now */
            w->state = WORKER_BACKOFF;
            arm_timer(w, 1000);
            return;
        }
        /* our own binary is missing or broken: no retry will do better */
        w->state = WORKER_FAILED;
        w->group->ops->changed(w->group, "its worker process could not be started");
        return;
    }
    w->pid = pid;
    worker_log_free(w->log); /* the predecessor's, if it was respawned */
    w->log = NULL;
    int log_rd = worker_exec_take_log();
    if (log_rd >= 0)
        w->log =
            worker_log_new(log_rd, w->id, w->group->name, w->group->version, worker_metric_line, w);
    w->state = WORKER_STARTING;
    w->start_wall_ms = ts_wall_ms();
    TAILQ_INSERT_TAIL(&all_workers, w, glink);
    evutil_make_socket_nonblocking(sv[0]);
    w->conn.bev = bufferevent_socket_new(srv->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    w->conn.unsent = 0;
    bufferevent_setcb(w->conn.bev, on_read, NULL, on_event, w);
    bufferevent_enable(w->conn.bev, EV_READ);

    struct worker_group *g = w->group;
    struct otf_load l = {
        .model_name = otf_s(g->name),
        .model_path = otf_s(g->dir),
        .batch_size = g->batch_size,
        .handler = otf_s(g->handler),
        .gpu_id = w->gpu_id,
        .envelope = otf_s(g->envelope),
        .limit_max_image_pixels = 1,
    };
    buf_reset(&w->out);
    otf_encode_load(&w->out, &l);
    worker_out_now(&w->conn, w->out.data, w->out.len);
    arm_timer(w, (int64_t)g->startup_timeout_s * 1000);
    if (w->gpu_id >= 0)
        LOG_INFO("spawned worker %d (pid %d) for model %s %s on GPU %d", w->id, (int)pid, g->name,
                 g->version, w->gpu_id);
    else
        LOG_INFO("spawned worker %d (pid %d) for model %s %s", w->id, (int)pid, g->name,
                 g->version);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    switch (w->state) {
    case WORKER_STARTING:
        LOG_ERROR("worker %d did not load within startupTimeout; killing it", w->id);
        worker_kill(w, "Worker did not load the model in given time");
        break;
    case WORKER_READY:
    case WORKER_STOPPING:
        if (w->n_inflight > w->n_paused) {
            LOG_ERROR("worker %d did not respond within responseTimeout; killing it", w->id);
            worker_kill(w, "Worker did not respond in given time");
        }
        break;
    case WORKER_BACKOFF:
        if (w->group)
            worker_spawn(w);
        break;
    default:
        break;
    }
}

/* What a dead worker wrote before it died and the loop has not read yet (its SIGCHLD can be
 * handled before its socket's last read event): those answers reach their clients, and
 * give_back then counts only what the worker had not answered. Its pid is 0 by now, so the
 * dispatch that the answers' freed slots start does not pick it. A socket bufferevent keeps its
 * input's end frozen except around its own reads, and evbuffer_read refuses a frozen end: it
 * is unfrozen around these reads the same way. */
static void read_last_answers(struct worker *w)
{
    if (!w->conn.bev)
        return;
    evutil_socket_t fd = bufferevent_getfd(w->conn.bev);
    struct evbuffer *in = bufferevent_get_input(w->conn.bev);
    evbuffer_unfreeze(in, 0);
    while (fd >= 0 && evbuffer_read(in, fd, 65536) > 0)
        ;
    evbuffer_freeze(in, 0);
    if (evbuffer_get_length(in) > 0)
        on_read(w->conn.bev, w);
}

static void reap(struct worker *w, int status)
{
    struct worker_group *g = w->group;
    TAILQ_REMOVE(&all_workers, w, glink);
    w->pid = 0;
    read_last_answers(w);
    worker_out_close(&w->conn);
    worker_log_free(w->log); /* its last lines, then the pipe */
    w->log = NULL;
    evtimer_del(w->timer);

    char how[64];
    int fatal = WIFEXITED(status) && WEXITSTATUS(status) == 2;
    int oom = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
              oom_kill_count() > w->oom_kills_at_spawn && !w->kill_reason;
    if (WIFEXITED(status))
        snprintf(how, sizeof(how), "exit code %d", WEXITSTATUS(status));
    else
        snprintf(how, sizeof(how), "signal %d", WTERMSIG(status));

    if (w->n_inflight > 0) {
        char msg[256];
        if (w->kill_reason)
            snprintf(msg, sizeof(msg), "%s", w->kill_reason);
        else if (oom)
            snprintf(msg, sizeof(msg), "Worker died: killed by the kernel, out of memory");
        else
            snprintf(msg, sizeof(msg), "Worker died. (%s)", how);
        int back = give_back(w);
        if (back > 0)
            LOG_WARN("worker %d: %d request(s) it had not started go back to the queue", w->id,
                     back);
        LOG_WARN("worker %d: failing %d in-flight request(s): %s", w->id, w->n_inflight, msg);
        /* HTTP keeps TorchServe's 500 "Worker died."; gRPC says UNAVAILABLE (retry later) */
        struct job *j;
        TAILQ_FOREACH(j, &w->inflight, link)
        j->worker_lost = !w->kill_reason && !oom;
        fail_inflight(w, oom ? 507 : 500, "InternalServerException", msg);
    }

    if (!g || w->state == WORKER_STOPPING) {
        LOG_INFO("worker %d stopped (%s)", w->id, how);
        detach_from_group(w);
        worker_free(w);
        return;
    }
    if (fatal) {
        LOG_ERROR("worker %d of model %s exited with code 2 (fatal); not respawning", w->id,
                  g->name);
        w->state = WORKER_FAILED;
        g->ops->changed(g, "its workers failed to load the model");
        return;
    }
    /* The back-off is for a worker that cannot stay up (a crash at load, or soon after). One
     * that answered a request did, and is respawned at once: a kill loop from outside (an
     * operator, the OOM killer, a request that crashes the handler, which fails and is not run
     * again) otherwise grew the delay to 30 s, and the model stayed down that long after it. */
    if (w->state == WORKER_READY &&
        (w->steps > 0 || ts_now_us() - w->ready_since_us > 10 * 1000000LL))
        w->retries = 0;
    int delay = w->retries == 0 ? 0 : 250 << (w->retries - 1 < 8 ? w->retries - 1 : 8);
    if (delay > BACKOFF_MAX_MS)
        delay = BACKOFF_MAX_MS;
    w->retries++;
    LOG_WARN("worker %d of model %s died (%s); respawning in %d ms", w->id, g->name, how, delay);
    w->state = WORKER_BACKOFF;
    arm_timer(w, delay);
    g->ops->changed(g, NULL);
}

static void on_sigchld(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        struct worker *w;
        TAILQ_FOREACH(w, &all_workers, glink)
        if (w->pid == pid)
            break;
        if (w)
            reap(w, status);
    }
}

int worker_pool_init(void)
{
    ev_sigchld = evsignal_new(srv->base, SIGCHLD, on_sigchld, NULL);
    if (worker_out_init() != 0) /* then every batch is sent at once */
        LOG_WARN("no memory for the end-of-turn event: batches go to workers one by one");
    return evsignal_add(ev_sigchld, NULL);
}

void worker_group_init(struct worker_group *g, const struct worker_group_ops *ops)
{
    memset(g, 0, sizeof(*g));
    TAILQ_INIT(&g->workers);
    g->ops = ops;
}

static struct worker *worker_new(struct worker_group *g)
{
    struct worker *w = xcalloc(1, sizeof(*w));
    w->id = srv->next_worker_id++;
    w->gpu_id = gpu_plan_next(&g->gpu, &srv->gpu_counter);
    w->group = g;
    TAILQ_INIT(&w->inflight);
    w->progress.fd = -1;
    buf_init(&w->out);
    w->timer = evtimer_new(srv->base, on_timer, w);
    TAILQ_INSERT_TAIL(&g->workers, w, link);
    g->n_workers++;
    return w;
}

/* Stops one worker: no new work; the process exits when its socket closes. */
/* Stops one worker: no new work; the process exits when its socket closes. A worker scaled
 * down (graceful) first answers what it holds, within responseTimeout as ever; one whose model
 * is going away fails it at once. */
static void worker_stop(struct worker *w, int graceful)
{
    if (w->pid <= 0) { /* backoff or failed: nothing running */
        detach_from_group(w);
        worker_free(w);
        return;
    }
    w->state = WORKER_STOPPING;
    if (graceful && w->n_inflight > 0 && w->conn.bev) {
        LOG_INFO("worker %d stops once its %d in-flight request(s) are answered", w->id,
                 w->n_inflight);
        return;
    }
    evtimer_del(w->timer);
    fail_inflight(w, 503, "ServiceUnavailableException", "Worker was stopped (scaled down)");
    worker_out_close(&w->conn);
}

int worker_pool_scale(struct worker_group *g, int n)
{
    int alive = 0;
    struct worker *w, *tmp;
    TAILQ_FOREACH(w, &g->workers, link)
    if (w->state != WORKER_STOPPING)
        alive++;
    /* failed workers stay visible until scaled; scaling clears them */
    TAILQ_FOREACH_SAFE(w, &g->workers, link, tmp)
    if (w->state == WORKER_FAILED && n != alive) {
        detach_from_group(w);
        worker_free(w);
        alive--;
    }
    while (alive < n) {
        worker_spawn(worker_new(g));
        alive++;
    }
    /* stop the newest first, preferring idle ones */
    for (int pass = 0; pass < 2 && alive > n; pass++) {
        TAILQ_FOREACH_REVERSE_SAFE(w, &g->workers, worker_list, link, tmp)
        {
            if (alive <= n)
                break;
            if (w->state == WORKER_STOPPING || (pass == 0 && w->n_inflight > 0))
                continue;
            worker_stop(w, n > 0);
            alive--;
        }
    }
    if (n == 0) {
        /* the model is going away: stopping workers are reaped without it */
        TAILQ_FOREACH_SAFE(w, &g->workers, link, tmp)
        detach_from_group(w);
    }
    return 0;
}

int worker_takes_jobs(const struct worker *w)
{
    return w->state == WORKER_READY && w->conn.bev && w->pid > 0;
}

void worker_send_batch(struct worker *w, struct job **jobs, int n)
{
    struct buf *b = worker_out_batch_buf(&w->conn); /* no copy: it waits there */
    otf_encode_infer_begin(b);
    for (int i = 0; i < n; i++) {
        struct job *j = jobs[i];
        struct job_otf o;
        job_to_otf(j, &o);
        otf_encode_request(b, &o.r);
        job_otf_done(&o);
        j->state = JOB_RUNNING;
        j->worker = w;
        j->dispatched_us = ts_now_us();
        j->wseq = w->sent++;
        TAILQ_INSERT_TAIL(&w->inflight, j, link);
        w->n_inflight++;
    }
    otf_encode_list_end(b);
    worker_out_batch_end(&w->conn, n);
    /* streamed input that came while a job was queued follows its batch */
    for (int i = 0; i < n; i++)
        if (jobs[i]->input_stream)
            worker_send_input(w, jobs[i]);
    w->group->n_batches++;
    hist_observe(&w->group->batch_sizes, hist_size_bounds, n);
    if ((uint64_t)n > w->group->max_batch_seen)
        w->group->max_batch_seen = (uint64_t)n;
    if (!evtimer_pending(w->timer, NULL))
        arm_timer(w, (int64_t)w->group->response_timeout_s * 1000);
}

void worker_send_seq_event(struct worker *w, const char *seq_id, int event)
{
    if (!w->conn.bev)
        return; /* a respawned worker learns from the state store instead */
    buf_reset(&w->out);
    otf_encode_seq_event(&w->out, otf_s(seq_id), event);
    worker_out_now(&w->conn, w->out.data, w->out.len);
}

void worker_pause_job(struct worker *w, struct job *j, int paused)
{
    j->paused = paused;
    w->n_paused += paused ? 1 : -1;
    if (w->conn.bev) {
        struct otf_str id = otf_s(j->id);
        buf_reset(&w->out);
        otf_encode_pause(&w->out, &id, 1, paused);
        worker_out_now(&w->conn, w->out.data, w->out.len);
    }
    LOG_REQ(LOG_LEVEL_INFO, j->rid,
            paused ? "client reads slower than its stream: paused on worker %d"
                   : "client caught up: resumed on worker %d",
            w->id);
    if (w->n_inflight == w->n_paused)
        evtimer_del(w->timer);
    else if (!paused && w->group)
        arm_timer(w, (int64_t)w->group->response_timeout_s * 1000);
}

void worker_send_input(struct worker *w, struct job *j)
{
    struct job_input *in;
    buf_reset(&w->out);
    while ((in = job_input_take(j))) {
        otf_encode_input(&w->out, otf_s(j->id), otf_s(in->ctype), otf_sn(in->body, in->len));
        free(in->body);
        free(in);
    }
    if (!j->input_open && !j->input_end_sent) {
        struct otf_str id = otf_s(j->id);
        otf_encode_input_end(&w->out, &id, 1);
        j->input_end_sent = 1;
    }
    if (w->out.len)
        worker_out_now(&w->conn, w->out.data, w->out.len);
}

void worker_cancel_job(struct worker *w, struct job *j)
{
    inflight_remove(w, j);
    if (w->conn.bev) {
        struct otf_str id = otf_s(j->id);
        buf_reset(&w->out);
        otf_encode_cancel(&w->out, &id, 1);
        worker_out_now(&w->conn, w->out.data, w->out.len);
    }
    LOG_REQ(LOG_LEVEL_INFO, j->rid, "client went away; cancelled on worker %d", w->id);
    if (w->n_inflight == w->n_paused)
        evtimer_del(w->timer);
    if (w->state == WORKER_STOPPING && w->n_inflight == 0)
        worker_out_close(&w->conn); /* scaled down and nothing left to answer */
    if (w->group)
        w->group->ops->slots(w->group);
}

void worker_pool_shutdown(void)
{
    struct worker *w;
    TAILQ_FOREACH(w, &all_workers, glink)
    {
        w->state = WORKER_STOPPING;
        worker_out_close(&w->conn);
    }
    int64_t deadline = ts_now_us() + 5 * 1000000LL;
    while (!TAILQ_EMPTY(&all_workers)) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            TAILQ_FOREACH(w, &all_workers, glink)
            if (w->pid == pid)
                break;
            if (w)
                reap(w, status);
            continue;
        }
        if (pid < 0 && errno == ECHILD)
            break;
        if (ts_now_us() > deadline) {
            TAILQ_FOREACH(w, &all_workers, glink)
            if (w->pid > 0)
                kill(w->pid, SIGKILL);
            deadline = ts_now_us() + 5 * 1000000LL;
        }
        usleep(10000);
    }
    if (ev_sigchld) {
        event_free(ev_sigchld);
        ev_sigchld = NULL;
    }
    worker_out_shutdown();
}
