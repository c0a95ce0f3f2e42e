/*
 * torchserve-c-worker: one model per process, driven by the frontend over fd 3.
 *
 * The frontend spawns us with its end of a SOCK_STREAM socketpair on fd 3. The first frame is
 * 'L' (load); we answer 200 "loaded model <name>" (+ " continuous=1" for continuous handlers)
 * or 500 <reason> and exit(2), which the frontend reads as "fatal, do not respawn". After that:
 * 'I' adds requests, 'C' cancels them, 'P'/'R' pause and resume held ones (the frontend's buffer
 * for a slow client is full), 'S' delivers a sequence event, 'D'/'E' bring a request's streamed
 * input (ctx_input.c); EOF means exit(0). Besides the socket, the loop waits on the handler's
 * wake-up descriptor (ts_set_wake_fd) while it holds requests.
 *
 * The loop is single-threaded. Each step takes the held (continuing) requests whose wake-up time
 * has passed, then new ones, at most batch_size (twice that under sequence continuous batching,
 * where a sequence's next request joins its running one), makes one handle() call, and writes the
 * step's predictions. Between steps it waits in ppoll() on fd 3 until the next wake-up, so a
 * streaming handler never sleeps inside handle(): waiting is the loop's job, and new requests join
 * the next step (continuous batching). The socket is non-blocking for reads; writes are whole (the
 * loop polls for POLLOUT on a full socket buffer).
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "busy_poll.h"
#include "ctx.h"
#include "handler_loader.h"
#include "log.h"
#include "manifest.h"
#include "torch/torch_shim.h"

/* how many answers, and for how long, a step's answers may wait for the next step's (one write
 * and one read for both): see hold_answers */
#define HOLD_ANSWERS 8
#define HOLD_US 200
#define HOLD_BYTES 65536
#define READ_CHUNK 65536

/* ---------------------------------------------------------------- socket */

static void write_all(struct ts_ctx *c, const uint8_t *p, size_t len)
{
    while (len && !c->eof) {
        ssize_t n = write(c->fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
            poll(&pfd, 1, -1);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            LOG_INFO("frontend socket closed on write (%s); exiting", strerror(errno));
            c->eof = 1;
        }
    }
}

static int worker_flush(struct ts_ctx *c)
{
    c->held_since_us = 0;
    c->n_held = 0;
    ctx_close_frame(c);
    /* every state a frame acknowledges is on disk before the frame leaves; if that fails (a
     * full disk), those answers become errors and nothing in memory stays ahead of the disk */
    int rc;
    if (!c->eof && (rc = ctx_state_commit(c)))
        ctx_fail_uncommitted(c, rc);
    if (c->out.len) {
        write_all(c, c->out.data, c->out.len);
        /* a stream's frames, and the worker goes on computing (a handler mid-call, or requests
         * that continue at the next step): the write woke the frontend onto this core, as the
         * kernel does for a socket's reader (a "sync" wake-up: the writer is taken to sleep
         * next), and under SCHED_BATCH (sched_batch) it would wait there for the next step's
         * end or the 4 ms tick. Yielding lets it pass the frames on now: tiny_gpt's lone stream
         * got its tokens in bursts every 4 ms (inter-token p50 0.0 ms, p99 4.0-4.2) before,
         * and 0.5 / 0.7 ms after, with the same tokens/s at 32 and 64 streams (llm_bench) */
        if (c->in_handle || c->held_head)
            sched_yield();
    }
    ctx_out_sent(c);
    return c->eof ? -EPIPE : 0;
}

static void progress_set(uint64_t *at, uint64_t v)
{
    __atomic_store_n(at, v, __ATOMIC_RELEASE);
}

/* The frontend's progress page on fd OTF_PROGRESS_FD (otf.h), or NULL: a worker started by
 * other means (a test's socketpair) has none, or something else there. */
static struct otf_progress *progress_map(void)
{
    char path[32], name[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", OTF_PROGRESS_FD);
    ssize_t n = readlink(path, name, sizeof(name) - 1);
    if (n < 0)
        return NULL;
    name[n] = 0;
    static const char ours[] = "/memfd:" OTF_PROGRESS_NAME " ";
    if (strncmp(name, ours, sizeof(ours) - 1))
        return NULL;
    struct otf_progress *p =
        mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, OTF_PROGRESS_FD, 0);
    close(OTF_PROGRESS_FD);
    if (p == MAP_FAILED)
        return NULL;
    progress_set(&p->magic, OTF_PROGRESS_MAGIC);
    return p;
}

/* A load reply or any other frame without predictions. */
static void send_status_frame(struct ts_ctx *c, int code, const char *msg)
{
    ctx_close_frame(c);
    otf_encode_response_begin(&c->out, code, otf_s(msg));
    otf_encode_list_end(&c->out);
    worker_flush(c);
}

static void load_fail(struct ts_ctx *c, const char *msg)
{
    LOG_ERROR("load failed: %s", msg);
    send_status_frame(c, 500, msg);
    ctx_destroy(c);
    exit(WORKER_EXIT_FATAL);
}

/* ---------------------------------------------------------------- load */

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The worker's libtorch and the GPU it was given, in its log; the same as tokens for the load
 * reply (" torch=2.11.0 cuda=1": the version, the CUDA devices it sees), which the frontend
 * logs once at start-up. */
static void runtime_tokens(const struct ts_ctx *c, char *out, size_t n)
{
    struct tsh_runtime rt;
    tsh_runtime_info(&rt);
    if (c->gpu_id < 0)
        LOG_INFO("libtorch %s (%d CUDA device(s)); this worker runs on the CPU", rt.torch_version,
                 rt.device_count);
    else if (!rt.cuda_available)
        LOG_WARN("gpu_id %d assigned, but this worker's libtorch %s has no CUDA (a CPU build, or "
                 "no driver): its models run on the CPU",
                 c->gpu_id, rt.torch_version);
    else
        LOG_INFO("libtorch %s sees %d CUDA device(s); this worker's GPU is cuda:%d",
                 rt.torch_version, rt.device_count, c->gpu_id);
    snprintf(out, n, " torch=%s cuda=%d", rt.torch_version, rt.device_count);
}

static void do_load(struct ts_ctx *c, const struct otf_load *l)
{
    char err[1024];
    int64_t t0 = ts_now_us();
    c->model_name = otf_strdup(l->model_name);
    c->model_dir = otf_strdup(l->model_path);
    c->batch_size = l->batch_size > 0 ? l->batch_size : 1;
    c->gpu_id = l->gpu_id >= 0 ? l->gpu_id : -1;
    char runtime[96];
    runtime_tokens(c, runtime, sizeof(runtime));

    struct manifest m;
    if (manifest_load(c->model_dir, &m, err, sizeof(err)))
        load_fail(c, err);
    c->serialized_file = xstrdup(m.serialized_file);

    char *cfg_path = NULL;
    if (*m.config_file) {
        cfg_path = xasprintf("%s/%s", c->model_dir, m.config_file);
    } else {
        cfg_path = xasprintf("%s/model-config.yaml", c->model_dir);
        if (!file_exists(cfg_path)) {
            free(cfg_path);
            cfg_path = NULL;
        }
    }
    if (cfg_path) {
        const char *base = strrchr(cfg_path, '/');
        int rc = yflat_parse_file(cfg_path, base ? base + 1 : cfg_path, &c->cfg, err, sizeof(err));
        free(cfg_path);
        if (rc) {
            manifest_free(&m);
            load_fail(c, err);
        }
    }

    /* TorchServe sends the model path again when the handler is null (a frontend quirk) */
    char *spec = otf_strdup(l->handler);
    if (!*spec || !strcmp(spec, c->model_dir)) {
        free(spec);
        spec = xstrdup(*m.handler ? m.handler : "torchscript");
    }
    const char *cb = ts_config_get(c, "continuousBatching");
    int continuous = 0;
    if (cb && ts_parse_bool(cb, &continuous))
        continuous = 0;
    c->h = handler_loader_find(spec, m.runtime, continuous, c->model_dir, err, sizeof(err));
    manifest_free(&m);
    if (!c->h) {
        free(spec);
        load_fail(c, err);
    }
    c->handler_spec = xstrdup(spec);
    if (c->h->init(c, &c->hstate) < 0) {
        free(spec);
        load_fail(c, c->load_err[0] ? c->load_err : "handler init failed");
    }
    c->loaded = 1;
    continuous = (c->h->flags & TS_HANDLER_CONTINUOUS) != 0;
    /* Under sequence continuous batching the frontend lets a sequence's next request join its
     * running one (frontend/core/sequence.c): up to batchSize sequences, and TorchServe's
     * 2 x batchSize requests in all, which one step takes together. */
    const char *sb = ts_config_get(c, "sequenceBatching");
    int sequences = 0;
    if (sb && ts_parse_bool(sb, &sequences))
        sequences = 0;
    c->step_max = continuous && sequences ? 2 * c->batch_size : c->batch_size;
    LOG_INFO("loaded model %s from %s: handler %s (%s), batch size %d%s, %.1f ms", c->model_name,
             c->model_dir, c->h->name, spec, c->batch_size, continuous ? ", continuous" : "",
             (double)(ts_now_us() - t0) / 1000.0);
    free(spec);
    char *msg =
        xasprintf("loaded model %s%s%s", c->model_name, continuous ? " continuous=1" : "", runtime);
    send_status_frame(c, 200, msg);
    free(msg);
}

/* ---------------------------------------------------------------- frames */

static void list_append(struct wreq **head, struct wreq **tail, struct wreq *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

/* Removes and frees the request with this id from a list; 1 if found. */
static int list_drop(struct wreq **head, struct wreq **tail, const char *id)
{
    struct wreq *prev = NULL;
    for (struct wreq *r = *head; r; prev = r, r = r->next) {
        if (strcmp(r->id, id))
            continue;
        if (prev)
            prev->next = r->next;
        else
            *head = r->next;
        if (*tail == r)
            *tail = prev;
        wreq_free(r);
        return 1;
    }
    return 0;
}

static void cancel_one(struct ts_ctx *c, const char *id)
{
    ctx_park_drop(c, id); /* what it answered while paused, if it was */
    if (list_drop(&c->pending_head, &c->pending_tail, id) ||
        list_drop(&c->held_head, &c->held_tail, id)) {
        LOG_REQ(LOG_LEVEL_DEBUG, id, "cancelled");
        return;
    }
    for (size_t i = 0; i < c->ncur; i++)
        if (!strcmp(c->cur[i]->id, id)) {
            c->cur[i]->cancelled = 1;
            LOG_REQ(LOG_LEVEL_DEBUG, id, "cancelled during a handle call");
            return;
        }
    LOG_REQ(LOG_LEVEL_DEBUG, id, "cancel for a request the worker does not hold");
}

/* A paused request stays held and is left out of steps until it is resumed: its client is not
 * reading, and the frontend would have to buffer what it streams. The others go on. What it
 * answers meanwhile (in the step the pause arrived in, or in a handle call streaming to it) is
 * parked (ctx_park.c) and written when it is resumed, even once it has finished. */
/* The request with this id, wherever the worker holds it; NULL if it holds none. */
static struct wreq *find_req(struct ts_ctx *c, const char *id)
{
    struct wreq *lists[] = {c->held_head, c->pending_head};
    for (size_t l = 0; l < 2; l++)
        for (struct wreq *r = lists[l]; r; r = r->next)
            if (!strcmp(r->id, id))
                return r;
    for (size_t i = 0; i < c->ncur; i++)
        if (!strcmp(c->cur[i]->id, id))
            return c->cur[i];
    return NULL;
}

static void pause_one(struct ts_ctx *c, const char *id, int paused)
{
    if (!paused && ctx_unpark(c, id) && !c->in_handle)
        worker_flush(c); /* in a handle call: with the call's next flush */
    struct wreq *r = find_req(c, id);
    if (r) {
        r->paused = paused;
        LOG_REQ(LOG_LEVEL_DEBUG, id, paused ? "paused" : "resumed");
    }
}

/* A message, or the end, of a request's streamed input (ctx_input.c): a held request is due at
 * once to take it. */
static void input_one(struct ts_ctx *c, struct otf_str sid, const struct otf_command *cmd)
{
    char *id = otf_strdup(sid);
    struct wreq *r = find_req(c, id);
    if (!r)
        LOG_REQ(LOG_LEVEL_DEBUG, id, "input for a request the worker does not hold: dropped");
    else if (cmd->cmd == OTF_CMD_INPUT)
        ctx_input_add(r, cmd->input_ctype, cmd->input_body);
    else
        ctx_input_end(r);
    if (r) {
        r->wake_us = 0;
        r->input_arrived = 1;
    }
    free(id);
}

/* A customized describe (describe: True, from GET /models/NAME?customized=true) asks the
 * handler about itself: TorchServe's BaseHandler answers with describe_handle(), and so does our
 * Python one. The C handlers have no such entry in their ABI, so the worker answers for them,
 * with what the Python BaseHandler answers by default: {}. 1 when answered (r is freed). */
static int describe_in_worker(struct ts_ctx *c, struct wreq *r)
{
    const char *d = NULL;
    if (!strcmp(c->h->name, "python"))
        return 0;
    for (size_t i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].key, "describe"))
            d = r->headers[i].val;
    if (!d || strcasecmp(d, "true"))
        return 0;
    free(r->body);
    r->body = xstrdup("{}");
    r->body_len = 2;
    r->has_response = 1;
    free(r->ctype);
    r->ctype = xstrdup("application/json");
    ctx_queue_final(c, r);
    wreq_free(r);
    worker_flush(c);
    return 1;
}

static void process_command(struct ts_ctx *c, const struct otf_command *cmd)
{
    switch (cmd->cmd) {
    case OTF_CMD_LOAD:
        if (c->loaded || c->in_handle) {
            LOG_WARN("ignoring a second load frame");
            return;
        }
        do_load(c, &cmd->load);
        return;
    case OTF_CMD_INFER:
        if (!c->loaded) {
            LOG_ERROR("protocol error: inference frame before the load frame");
            c->eof = 2;
            return;
        }
        for (size_t i = 0; i < cmd->n_reqs; i++) {
            struct wreq *r = wreq_from_otf(&cmd->reqs[i]);
            r->seqno = c->arrived++;
            LOG_REQ(LOG_LEVEL_DEBUG, r->id, "received");
            if (!describe_in_worker(c, r))
                list_append(&c->pending_head, &c->pending_tail, r);
        }
        return;
    case OTF_CMD_CANCEL:
        for (size_t i = 0; i < cmd->n_ids; i++) {
            char *id = otf_strdup(cmd->ids[i]);
            cancel_one(c, id);
            free(id);
        }
        return;
    case OTF_CMD_PAUSE:
    case OTF_CMD_RESUME:
        for (size_t i = 0; i < cmd->n_ids; i++) {
            char *id = otf_strdup(cmd->ids[i]);
            pause_one(c, id, cmd->cmd == OTF_CMD_PAUSE);
            free(id);
        }
        return;
    case OTF_CMD_INPUT:
        input_one(c, cmd->input_id, cmd);
        return;
    case OTF_CMD_INPUT_END:
        for (size_t i = 0; i < cmd->n_ids; i++)
            input_one(c, cmd->ids[i], cmd);
        return;
    case OTF_CMD_SEQ_EVENT:
        if (c->n_seq == c->seq_cap) {
            c->seq_cap = c->seq_cap ? c->seq_cap * 2 : 8;
            c->seq = xrealloc(c->seq, c->seq_cap * sizeof(*c->seq));
        }
        c->seq[c->n_seq].seq_id = otf_strdup(cmd->seq_id);
        c->seq[c->n_seq].event = cmd->seq_event;
        c->n_seq++;
        return;
    default:
        return; /* the decoder refuses unknown commands */
    }
}

/* Decodes and processes every complete frame in rx. */
static void drain_rx(struct ts_ctx *c)
{
    while (c->rx_off < c->rx.len && !c->eof) {
        struct otf_command cmd;
        long n =
            otf_decode_command(c->rx.data + c->rx_off, c->rx.len - c->rx_off, c->max_field, &cmd);
        if (n == TS_E_INCOMPLETE)
            break;
        if (n < 0) {
            /* frames carry no length: there is no way to skip a bad one and resynchronise */
            LOG_ERROR("protocol error from the frontend: %s (command byte 0x%02x); exiting",
                      ts_strerror((int)n), c->rx.data[c->rx_off]);
            c->eof = 2;
            break;
        }
        c->rx_off += (size_t)n;
        process_command(c, &cmd);
        otf_command_free(&cmd);
    }
    if (c->rx_off == c->rx.len) {
        buf_reset(&c->rx);
        c->rx_off = 0;
    } else if (c->rx_off > 0) {
        memmove(c->rx.data, c->rx.data + c->rx_off, c->rx.len - c->rx_off);
        c->rx.len -= c->rx_off;
        c->rx_off = 0;
    }
}

/* Reads what the socket holds. A short read means it held no more at that moment: what comes
 * later is seen by the next ppoll() or the next read, so no read is spent on EAGAIN then. */
static void worker_poll_input(struct ts_ctx *c)
{
    int got = 0;
    c->last_read_us = ts_now_us();
    c->sent_since_read = 0;
    while (!c->eof) {
        buf_reserve(&c->rx, READ_CHUNK);
        size_t room = c->rx.cap - c->rx.len - 1;
        ssize_t n = read(c->fd, c->rx.data + c->rx.len, room);
        if (n > 0) {
            c->rx.len += (size_t)n;
            got = 1;
            if ((size_t)n < room)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n == 0)
            LOG_INFO("frontend closed the socket; exiting");
        else
            LOG_ERROR("read from the frontend: %s; exiting", strerror(errno));
        c->eof = 1;
    }
    if (got)
        drain_rx(c);
}

/* ctx_io.wait_input: a send waiting for its paused request's client (ctx.c). Writes what is
 * queued first: the frontend may be waiting for it. */
static void worker_wait_input(struct ts_ctx *c)
{
    if (worker_flush(c))
        return;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int n = ppoll(&pfd, 1, NULL, NULL);
    if (n > 0)
        worker_poll_input(c);
    else if (n < 0 && errno != EINTR) {
        LOG_ERROR("poll: %s", strerror(errno));
        c->eof = 1;
    }
}

/* ---------------------------------------------------------------- steps */

static void cur_push(struct ts_ctx *c, struct wreq *r)
{
    if (c->ncur == c->cur_cap) {
        c->cur_cap = c->cur_cap ? c->cur_cap * 2 : 16;
        c->cur = xrealloc(c->cur, c->cur_cap * sizeof(*c->cur));
    }
    r->next = NULL;
    c->cur[c->ncur++] = r;
}

/* Microseconds until the next step is due: 0 now, -1 nothing to do. */
static int64_t next_step_in(struct ts_ctx *c, int64_t now)
{
    if (c->pending_head)
        return 0;
    int64_t best = -1;
    for (struct wreq *r = c->held_head; r; r = r->next) {
        if (r->paused)
            continue;
        int64_t d = r->wake_us > now ? r->wake_us - now : 0;
        if (best < 0 || d < best)
            best = d;
    }
    return best;
}

/* TorchServe's per-batch HandlerTime and PredictionTime (gauges, ms), with the first request of
 * the step that is still wanted: one report per step, whatever the batch size. */
static void step_metrics(struct ts_ctx *c, int64_t handle_us, int64_t predict_us)
{
    for (size_t i = 0; i < c->ncur; i++)
        if (!c->cur[i]->cancelled) {
            /* gauges: a request that answers after several steps reports its latest */
            c->cur[i]->has_step = 1;
            c->cur[i]->step.handle_us = handle_us > 0 ? handle_us : 0;
            c->cur[i]->step.predict_us = predict_us > 0 ? predict_us : 0;
            return;
        }
}

/* Whether the answers of the step just run (step_us long, ending at now, full: it took
 * batchSize requests) wait in out for the next step's. Only with the progress page: a worker
 * that dies holding answers has finished those requests, and the frontend, which never got them,
 * must not fail them as the ones it ran (otf_progress). Written at once: HOLD_ANSWERS answers or
 * more, a slow step, a streaming request held for its next step, an empty queue, and a step
 * short of batchSize (the worker has caught up with the queue: nothing gains from waiting).
 * Held, the answers leave within HOLD_US plus one misjudged step, and before the loop sleeps
 * (serve). At batchSize 1 under load this is up to 8 answers per write instead of 1
 * (docs/performance.md); at batchSize 8 a full step writes at once. */
static int hold_answers(struct ts_ctx *c, int64_t now, int64_t step_us, int full)
{
    if (!c->progress || !full || !c->pending_head || c->held_head || c->n_held >= HOLD_ANSWERS ||
        c->out.len >= HOLD_BYTES)
        return 0;
    int64_t since = c->held_since_us ? c->held_since_us : now;
    if (now - since + step_us >= HOLD_US)
        return 0;
    c->held_since_us = since;
    return 1;
}

static void run_step(struct ts_ctx *c)
{
    int64_t now = ts_now_us();
    size_t bs = (size_t)c->step_max;
    c->ncur = 0;
    struct wreq *prev = NULL, *r = c->held_head;
    while (r && c->ncur < bs) {
        struct wreq *next = r->next;
        if (r->wake_us <= now && !r->paused) {
            if (prev)
                prev->next = next;
            else
                c->held_head = next;
            if (c->held_tail == r)
                c->held_tail = prev;
            cur_push(c, r);
        } else {
            prev = r;
        }
        r = next;
    }
    while (c->pending_head && c->ncur < bs) {
        r = c->pending_head;
        c->pending_head = r->next;
        if (!c->pending_head)
            c->pending_tail = NULL;
        cur_push(c, r);
    }
    if (!c->ncur)
        return;
    for (size_t i = 0; i < c->ncur; i++) {
        c->cur[i]->continued = 0;
        c->cur[i]->input_arrived = 0;
    }

    /* PredictionTime: from the oldest new request's arrival (a held one: the step's start) */
    int64_t since = now;
    uint64_t upto = 0; /* one past the step's last request (otf_progress) */
    for (size_t i = 0; i < c->ncur; i++) {
        if (c->cur[i]->is_new && c->cur[i]->read_us < since)
            since = c->cur[i]->read_us;
        if (c->cur[i]->seqno >= upto)
            upto = c->cur[i]->seqno + 1;
    }
    if (c->progress)
        progress_set(&c->progress->started, upto);
    c->in_handle = 1;
    int64_t t0 = ts_now_us();
    c->h->handle(c->hstate, c, c->ncur);
    int64_t t1 = ts_now_us();
    c->in_handle = 0;
    LOG_DEBUG("step: %zu request(s), handle %lld us", c->ncur, (long long)(t1 - t0));
    step_metrics(c, t1 - t0, t1 - since);

    for (size_t i = 0; i < c->ncur; i++) {
        r = c->cur[i];
        if (r->cancelled) {
            wreq_free(r);
        } else if (r->continued) {
            r->is_new = 0;
            /* input that came while it ran is for its next step, now */
            r->wake_us = r->input_arrived ? t1 : t1 + r->delay_us;
            list_append(&c->held_head, &c->held_tail, r);
        } else {
            ctx_queue_final(c, r);
            wreq_free(r);
            c->n_held++;
        }
    }
    size_t nstep = c->ncur;
    c->ncur = 0;
    if (c->progress)
        progress_set(&c->progress->finished, upto);
    if (!hold_answers(c, ts_now_us(), t1 - t0, nstep >= (size_t)c->batch_size))
        worker_flush(c);
}

static void deliver_seq_events(struct ts_ctx *c)
{
    for (size_t i = 0; i < c->n_seq; i++) {
        LOG_DEBUG("sequence %s: event %d", c->seq[i].seq_id, c->seq[i].event);
        if (c->loaded && c->h->seq_event)
            c->h->seq_event(c->hstate, c, c->seq[i].seq_id, c->seq[i].event);
        if (c->loaded)
            ctx_state_drop(c, c->seq[i].seq_id);
        free(c->seq[i].seq_id);
    }
    c->n_seq = 0;
}

/* Fewer than n requests wait for a step (the next one would not be full). */
static int pending_below(const struct ts_ctx *c, int n)
{
    for (const struct wreq *r = c->pending_head; r; r = r->next)
        if (--n <= 0)
            return 0;
    return 1;
}

static struct busy_poll bp, no_bp; /* --busy-poll-us; and none, until the model is loaded */

/* What a wait watches: the frontend's socket, and the handler's wake-up descriptor while it
 * holds requests (ts_set_wake_fd). */
struct wait_fds {
    struct pollfd pfd[2];
    nfds_t n;
};

static int look_input(void *arg)
{
    static const struct timespec zero = {0, 0};
    struct wait_fds *w = arg;
    return ppoll(w->pfd, w->n, &zero, NULL);
}

static int block_input(void *arg, int64_t left_us)
{
    struct timespec ts = {.tv_sec = left_us / 1000000, .tv_nsec = (left_us % 1000000) * 1000};
    struct wait_fds *w = arg;
    return ppoll(w->pfd, w->n, left_us < 0 ? NULL : &ts, NULL);
}

/* A held request that a wake-up would make due (paused ones wait for their resume). */
static int holds_wakeable(const struct ts_ctx *c)
{
    for (const struct wreq *r = c->held_head; r; r = r->next)
        if (!r->paused)
            return 1;
    return 0;
}

/* Waits until the frontend's socket is readable or wait_us (< 0: no limit) from now; ppoll's
 * result. A loaded worker looks without sleeping first (busy_poll.h). When the handler's wake-up
 * descriptor is readable, every held request is due now. */
static int wait_input(struct ts_ctx *c, int64_t now, int64_t wait_us)
{
    struct wait_fds w = {.pfd = {{.fd = c->fd, .events = POLLIN}}, .n = 1};
    if (c->wake_fd >= 0 && holds_wakeable(c))
        w.pfd[w.n++] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    int n = busy_poll_wait(c->loaded ? &bp : &no_bp, now, wait_us, look_input, block_input, &w);
    if (n > 0 && w.n > 1 && (w.pfd[1].revents & (POLLIN | POLLERR | POLLHUP))) {
        for (struct wreq *r = c->held_head; r; r = r->next)
            r->wake_us = 0;
        if (!(w.pfd[0].revents & (POLLIN | POLLERR | POLLHUP)))
            n = 0; /* nothing to read on the socket */
    }
    return n;
}

/* With a step due now, the loop reads the socket at once instead of asking ppoll() first: one
 * system call instead of two. When a full batch already waits (the frontend queued batches
 * behind the last one), it does not read at all: what came since would only queue behind it,
 * and a cancel or pause is still seen within a millisecond, as in ts_is_cancelled(). */
static void serve(struct ts_ctx *c)
{
    while (!c->eof) {
        int64_t now = ts_now_us();
        int64_t wait = c->loaded ? next_step_in(c, now) : -1;
        if (wait == 0) {
            if (pending_below(c, c->batch_size) || now - c->last_read_us >= 1000)
                worker_poll_input(c);
        } else {
            if (c->n_held)
                worker_flush(c);
            int n = wait_input(c, now, wait);
            if (n < 0 && errno != EINTR) {
                LOG_ERROR("poll: %s", strerror(errno));
                break;
            }
            if (n > 0)
                worker_poll_input(c);
        }
        /* events first: a sequence that ended and a request restarting its id can arrive in
         * the same read, and the restart must not find its state deleted afterwards */
        deliver_seq_events(c);
        if (c->loaded && !c->eof && next_step_in(c, ts_now_us()) == 0)
            run_step(c);
        deliver_seq_events(c);
    }
}

int worker_run(const struct worker_opts *o)
{
    int fl = fcntl(o->fd, F_GETFL);
    if (fl < 0) {
        LOG_ERROR("fd %d is not open: start the worker from the frontend", o->fd);
        return WORKER_EXIT_FATAL;
    }
    fcntl(o->fd, F_SETFL, fl | O_NONBLOCK);
    fcntl(o->fd, F_SETFD, FD_CLOEXEC);

    static const struct ctx_io io = {
        .flush = worker_flush, .poll_input = worker_poll_input, .wait_input = worker_wait_input};
    busy_poll_init(&bp, o->busy_poll_us);
    struct ts_ctx c;
    ctx_init(&c, o->fd, o->max_request_size, &io);
    c.progress = progress_map();
    if (o->stream_buffer_size)
        c.park_max = o->stream_buffer_size;
    if (o->state_dir)
        c.state_dir = xstrdup(o->state_dir);
    if (o->state_redis)
        c.state_redis = xstrdup(o->state_redis);
    serve(&c);
    int code = c.eof == 2 ? 1 : 0;
    ctx_destroy(&c);
    return code;
}
