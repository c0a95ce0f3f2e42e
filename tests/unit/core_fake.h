/*
 * core_fake.h: what the core unit tests drive the scheduler with, instead of a server.
 *
 *   - A fake worker: worker_pool_set_exec(fake_exec) makes every "spawn" fork a child that speaks
 *     the real frame protocol (common/otf) on its end of the socketpair. It answers the load frame
 *     (handler "fake", or "fake-continuous" to announce continuous batching, or "fake-fail" to
 *     fail the load and exit 2), and each request as its header "do" says:
 *         (none)        one final frame, body "ok:<t>" (t: the request's header "t")
 *         wait:MS       the same after MS ms
 *         stream:N:MS   N frames "<t>:1".."<t>:N", MS ms apart, the last one final
 *         hang          never answers
 *         die           the worker exits at once (mid-batch)
 *         die-after:K   the worker exits after K frames of this request (mid-stream)
 *         progress-die:S:F   the worker writes started S and finished F into its progress
 *                       page (otf_progress), as a worker holding answers would, and exits
 *     Everything it receives goes to fake_log, one line each: "w<id> L <handler> gpu=<gpu_id>",
 *     "w<id> I t1 t2 ...",
 *     "w<id> C t", "w<id> S <seq> <event>", "w<id> P t" / "R t" (a paused request is held, as
 *     the real worker holds it, until it is resumed).
 *   - A recording sink (struct rec): what a client would have seen of a job.
 *   - run_until: turns the event loop until a condition holds or a deadline passes.
 * Header-only; one test file includes it once.
 */
#ifndef TS_CORE_FAKE_H
#define TS_CORE_FAKE_H

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config.h"
#include "core/core.h"
#include "core/job.h"
#include "core/model.h"
#include "core/sequence.h"
#include "core/worker_pool.h"
#include "log.h"
#include "otf.h"
#include "tap.h"
#include "util.h"

static char fake_log[128];
/* the worker's progress page, in a fake worker (inherited through fork; NULL elsewhere) */
static struct otf_progress *fake_progress;

/* ---------------------------------------------------------------- the fake worker (child) */

struct fake_req {
    char id[64], t[64], how[32];
    int n, ms, die_after, sent;
    int64_t due_us, paused_due;
    int active;
};

static void fake_logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fake_logf(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    int fd = open(fake_log, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0)
            _exit(9);
        close(fd);
    }
}

static void fake_write_all(int fd, const struct buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = write(fd, b->data + off, b->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0);
        off += (size_t)n;
    }
}

/* step_us >= 0: the answer carries the step's handle() time, as the real worker's do */
static void fake_answer(int fd, struct fake_req *q, const char *body, int final, int64_t step_us)
{
    struct buf b;
    buf_init(&b);
    otf_encode_response_begin(&b, 200, otf_s("ok"));
    uint8_t step[OTF_STEP_LEN];
    otf_step_encode(step, &(struct otf_step){step_us, step_us});
    struct otf_kv kv[2] = {{otf_s(OTF_STREAM_NEXT), otf_s(final ? "false" : "true")},
                           {otf_s(OTF_STEP_KEY), otf_sn((const char *)step, sizeof(step))}};
    struct otf_prediction p = {.id = otf_s(q->id),
                               .ctype = otf_s("text/plain"),
                               .status = 200,
                               .phrase = otf_s("OK"),
                               .headers = kv,
                               .n_headers = step_us >= 0 ? 2 : 1,
                               .body = otf_s(body)};
    otf_encode_prediction(&b, &p);
    otf_encode_list_end(&b);
    fake_write_all(fd, &b);
    buf_free(&b);
}

static const char *fake_hdr(const struct otf_request *r, const char *key, char *out, size_t n)
{
    const struct otf_kv *kv = otf_find_kv(r->headers, r->n_headers, key);
    out[0] = '\0';
    if (kv) {
        size_t len = kv->val.len > 0 ? (size_t)kv->val.len : 0;
        if (len >= n)
            len = n - 1;
        memcpy(out, kv->val.p, len);
        out[len] = '\0';
    }
    return out;
}

/* One step of a held request whose time has come: false when it is over. */
static int fake_step(int fd, int wid, struct fake_req *q)
{
    char body[160];
    if (!strcmp(q->how, "wait")) {
        snprintf(body, sizeof(body), "ok:%s", q->t);
        fake_answer(fd, q, body, 1, -1);
        if (q->die_after) { /* "wait-die:N" */
            fake_logf("w%d exit after answering %s", wid, q->t);
            _exit(1);
        }
        return 0;
    }
    q->sent++;
    snprintf(body, sizeof(body), "%s:%d", q->t, q->sent);
    fake_answer(fd, q, body, q->sent >= q->n, -1);
    if (q->die_after && q->sent >= q->die_after) {
        fake_logf("w%d exit after %d frames of %s", wid, q->sent, q->t);
        _exit(1);
    }
    q->due_us = ts_now_us() + (int64_t)q->ms * 1000;
    return q->sent < q->n;
}

static struct fake_req *fake_find(struct fake_req *reqs, size_t n, struct otf_str id)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i].active && otf_str_eq(id, reqs[i].id))
            return &reqs[i];
    return NULL;
}

static void fake_worker_main(int fd, int wid)
{
    static struct fake_req reqs[256];
    struct buf in;
    buf_init(&in);
    for (;;) {
        int64_t now = ts_now_us(), wait = -1;
        for (size_t i = 0; i < 256; i++)
            if (reqs[i].active && reqs[i].due_us) {
                int64_t d = reqs[i].due_us > now ? reqs[i].due_us - now : 0;
                if (wait < 0 || d < wait)
                    wait = d;
            }
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, wait < 0 ? -1 : (int)(wait / 1000) + 1);
        if (pr < 0 && errno != EINTR)
            _exit(3);
        now = ts_now_us();
        for (size_t i = 0; i < 256; i++)
            if (reqs[i].active && reqs[i].due_us && reqs[i].due_us <= now)
                if (!fake_step(fd, wid, &reqs[i]))
                    reqs[i].active = 0;
        if (pr <= 0 || !(pfd.revents & (POLLIN | POLLHUP)))
            continue;
        uint8_t chunk[65536];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            _exit(0); /* EOF: the frontend let us go */
        buf_put(&in, chunk, (size_t)n);
        size_t off = 0;
        for (;;) {
            struct otf_command c;
            long used = otf_decode_command(in.data + off, in.len - off, 1 << 20, &c);
            if (used == TS_E_INCOMPLETE)
                break;
            if (used < 0)
                _exit(4);
            off += (size_t)used;
            if (c.cmd == OTF_CMD_LOAD) {
                char *h = otf_strdup(c.load.handler);
                fake_logf("w%d L %s gpu=%d", wid, h, (int)c.load.gpu_id);
                struct buf b;
                buf_init(&b);
                if (!strcmp(h, "fake-fail")) {
                    otf_encode_response_begin(&b, 500, otf_s("cannot load"));
                    otf_encode_list_end(&b);
                    fake_write_all(fd, &b);
                    _exit(2);
                }
                otf_encode_response_begin(
                    &b, 200,
                    otf_s(!strcmp(h, "fake-continuous") ? "loaded continuous=1" : "loaded"));
                otf_encode_list_end(&b);
                fake_write_all(fd, &b);
                buf_free(&b);
                free(h);
            } else if (c.cmd == OTF_CMD_INFER) {
                /* logged before anything is answered: a test that sees an answer sees the line */
                char line[2048];
                int k = snprintf(line, sizeof(line), "w%d I", wid);
                struct fake_req *batch[256];
                for (size_t i = 0; i < c.n_reqs && i < 256; i++) {
                    struct fake_req *q = NULL;
                    for (size_t s = 0; s < 256 && !q; s++)
                        if (!reqs[s].active)
                            q = &reqs[s];
                    if (!q)
                        _exit(5);
                    memset(q, 0, sizeof(*q));
                    size_t idl = (size_t)c.reqs[i].id.len;
                    memcpy(q->id, c.reqs[i].id.p, idl < 63 ? idl : 63);
                    fake_hdr(&c.reqs[i], "t", q->t, sizeof(q->t));
                    fake_hdr(&c.reqs[i], "do", q->how, sizeof(q->how));
                    if (k < (int)sizeof(line) - 70)
                        k += snprintf(line + k, sizeof(line) - (size_t)k, " %s", q->t);
                    q->active = 1;
                    batch[i] = q;
                }
                fake_logf("%s", line);
                for (size_t i = 0; i < c.n_reqs && i < 256; i++) {
                    struct fake_req *q = batch[i];
                    char how[32];
                    snprintf(how, sizeof(how), "%s", q->how);
                    if (!strcmp(how, "die")) {
                        fake_logf("w%d exit on %s", wid, q->t);
                        _exit(1);
                    } else if (!strcmp(how, "answer-die")) { /* answers, then dies at once */
                        char body[96];
                        snprintf(body, sizeof(body), "ok:%s", q->t);
                        fake_answer(fd, q, body, 1, -1);
                        _exit(1);
                    } else if (!strcmp(how, "hang")) {
                        continue;
                    } else if (sscanf(how, "progress-die:%d:%d", &q->n, &q->ms) == 2) {
                        if (fake_progress) {
                            fake_progress->started = (uint64_t)q->n;
                            fake_progress->finished = (uint64_t)q->ms;
                            fake_progress->magic = OTF_PROGRESS_MAGIC;
                        }
                        fake_logf("w%d exit on %s", wid, q->t);
                        _exit(1);
                    } else if (sscanf(how, "wait-die:%d", &q->ms) == 1) { /* answers, dies */
                        snprintf(q->how, sizeof(q->how), "wait");
                        q->die_after = 1;
                        q->due_us = ts_now_us() + (int64_t)q->ms * 1000;
                    } else if (sscanf(how, "wait:%d", &q->ms) == 1) {
                        snprintf(q->how, sizeof(q->how), "wait");
                        q->due_us = ts_now_us() + (int64_t)q->ms * 1000;
                    } else if (sscanf(how, "stream:%d:%d", &q->n, &q->ms) == 2) {
                        snprintf(q->how, sizeof(q->how), "stream");
                        q->due_us = ts_now_us();
                    } else if (sscanf(how, "die-after:%d", &q->die_after) == 1) {
                        snprintf(q->how, sizeof(q->how), "stream");
                        q->n = q->die_after + 5;
                        q->ms = 5;
                        q->due_us = ts_now_us();
                    } else {
                        char body[96];
                        int step_us = -1; /* "step:N": answers at once, reporting an N µs step */
                        sscanf(how, "step:%d", &step_us);
                        snprintf(body, sizeof(body), "ok:%s", q->t);
                        fake_answer(fd, q, body, 1, step_us);
                        q->active = 0;
                    }
                }
            } else if (c.cmd == OTF_CMD_CANCEL || c.cmd == OTF_CMD_PAUSE ||
                       c.cmd == OTF_CMD_RESUME) {
                for (size_t i = 0; i < c.n_ids; i++) {
                    struct fake_req *q = fake_find(reqs, 256, c.ids[i]);
                    fake_logf("w%d %c %s", wid, c.cmd, q ? q->t : "?");
                    if (q && c.cmd == OTF_CMD_CANCEL)
                        q->active = 0;
                    else if (q && c.cmd == OTF_CMD_PAUSE) /* held, as the real worker does */
                        q->paused_due = q->due_us, q->due_us = 0;
                    else if (q && c.cmd == OTF_CMD_RESUME && q->paused_due)
                        q->due_us = q->paused_due, q->paused_due = 0;
                }
            } else if (c.cmd == OTF_CMD_SEQ_EVENT) {
                char *id = otf_strdup(c.seq_id);
                fake_logf("w%d S %s %d", wid, id, c.seq_event);
                free(id);
            }
            otf_command_free(&c);
        }
        memmove(in.data, in.data + off, in.len - off);
        in.len -= off;
    }
}

static int fake_exec(const struct worker *w, int fd, pid_t *pid, void *arg)
{
    (void)arg;
    pid_t p = fork();
    if (p < 0)
        return errno;
    if (p == 0) {
        /* a worker of its own: it must not hold the frontend's ends of any socket (its own
         * included, or it would never see EOF) nor the test runner's stdout, and it dies with
         * the test */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 3; i < 1024; i++)
            if (i != fd)
                close(i);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            close(null);
        }
        signal(SIGCHLD, SIG_DFL);
        fake_progress = w->progress.map;
        fake_worker_main(fd, w->id);
        _exit(0);
    }
    *pid = p;
    return 0;
}

/* ---------------------------------------------------------------- the recording sink */

struct rec {
    int frames, final, errors;
    int status;
    char body[256]; /* the frames' bodies, joined with '|' */
    char err[256];
};

static void rec_frame(struct job *j, const struct otf_prediction *p, int final)
{
    struct rec *r = j->sink_arg;
    r->frames++;
    r->final = final;
    r->status = p->status;
    size_t k = strlen(r->body);
    snprintf(r->body + k, sizeof(r->body) - k, "%s%.*s", k ? "|" : "", (int)p->body.len, p->body.p);
    if (final)
        job_unref(j); /* the transport's reference */
}

static void rec_error(struct job *j, int status, const char *type, const char *msg)
{
    (void)type;
    struct rec *r = j->sink_arg;
    r->errors++;
    r->status = status;
    snprintf(r->err, sizeof(r->err), "%s", msg);
    job_unref(j);
}

static const struct job_sink rec_sink = {rec_frame, rec_error};

/* A job as a transport would make it: t names it in the fake worker's log, how is its "do". */
static struct job *rec_job(struct rec *r, const char *t, const char *how)
{
    memset(r, 0, sizeof(*r));
    struct job *j = job_new(NULL, &rec_sink, r);
    job_add_header(j, "t", t, strlen(t));
    if (how)
        job_add_header(j, "do", how, strlen(how));
    return j;
}

/* ---------------------------------------------------------------- the loop */

static int loop_tick_armed;
static void on_loop_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Turns the loop until cond(arg) holds or ms pass; returns the condition. */
static int run_until(int (*cond)(void *), void *arg, int ms)
{
    static struct event *tick;
    if (!loop_tick_armed) {
        tick = event_new(srv->base, -1, EV_PERSIST, on_loop_tick, NULL);
        struct timeval tv = {0, 2000};
        event_add(tick, &tv);
        loop_tick_armed = 1;
    }
    int64_t end = ts_now_us() + (int64_t)ms * 1000;
    while (!cond(arg) && ts_now_us() < end)
        event_base_loop(srv->base, EVLOOP_ONCE);
    return cond(arg);
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

/* Turns the loop for ms. */
static void run_for(int ms)
{
    run_until(never, NULL, ms);
}

static int rec_done(void *arg)
{
    struct rec *r = arg;
    return r->final || r->errors;
}

/* both of two recs (an array) are done; inline: not every test file waits for two */
static inline int both_done(void *arg)
{
    struct rec *r = arg;
    return rec_done(&r[0]) && rec_done(&r[1]);
}

/* The fake workers' log so far. */
static char *fake_log_text(void)
{
    FILE *f = fopen(fake_log, "r");
    if (!f)
        return xstrdup("");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return xstrdup(text);
}

static int log_has(const char *needle)
{
    char *t = fake_log_text();
    int yes = strstr(t, needle) != NULL;
    free(t);
    return yes;
}

static int log_has_cond(void *arg)
{
    return log_has(arg);
}

/* ---------------------------------------------------------------- set-up */

static struct server fake_srv;

static void core_setup(void)
{
    srv = &fake_srv;
    memset(&fake_srv, 0, sizeof(fake_srv));
    LIST_INIT(&srv->models);
    config_defaults(&srv->cfg);
    srv->base = event_base_new();
    srv->next_worker_id = 9000;
    srv->worker_bin = "fake";
    snprintf(fake_log, sizeof(fake_log), "%s/fake.%d.log", tbase, (int)getpid());
    log_min_level = LOG_LEVEL_ERROR + 1; /* quiet */
    worker_pool_init();
    worker_pool_set_exec(fake_exec, NULL);
    loop_tick_armed = 0;
}

struct fake_model_opts {
    const char *name;
    const char *handler; /* "fake" unless given */
    int batch_size, max_batch_delay_ms, queue_max, workers, response_timeout_s;
    int sequences; /* sequenceBatching */
    /* model-config.yaml's deviceType (MC_DEVICE_*) and deviceIds, on srv->n_gpu GPUs */
    int device_type;
    const int *device_ids;
    int n_device_ids;
};

static int workers_ready(void *arg)
{
    struct model *m = arg;
    int n = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    n += worker_takes_jobs(w);
    return n == m->pool.n_workers && n > 0;
}

/* A registered model whose workers are the fake one, loaded. */
static struct model *fake_model(const struct fake_model_opts *o)
{
    struct model *m = model_new();
    m->name = xstrdup(o->name ? o->name : "m");
    m->version = xstrdup("1.0");
    m->url = xstrdup("m.mar");
    m->dir = xstrdup("/nonexistent");
    m->handler = xstrdup(o->handler ? o->handler : "fake");
    model_config_defaults(&m->mc);
    m->mc.sequence_batching = o->sequences;
    m->pool.batch_size = o->batch_size > 0 ? o->batch_size : 1;
    m->max_batch_delay_ms = o->max_batch_delay_ms;
    m->pool.response_timeout_s = o->response_timeout_s > 0 ? o->response_timeout_s : 30;
    m->pool.startup_timeout_s = 30;
    m->queue_max = o->queue_max > 0 ? o->queue_max : 100;
    char err[256];
    gpu_plan_init(&m->pool.gpu, o->device_type, o->device_ids, o->n_device_ids, srv->n_gpu, err,
                  sizeof(err));
    CHECK_EQ_INT(model_add(m, err, sizeof(err)), 0);
    worker_pool_scale(&m->pool, o->workers > 0 ? o->workers : 1);
    CHECK(run_until(workers_ready, m, 5000));
    return m;
}

static void core_teardown(void)
{
    model_unregister_all();
    worker_pool_shutdown();
}

#endif
