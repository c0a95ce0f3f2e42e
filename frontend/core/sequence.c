/*
 * sequence: job groups, pinning and the sequence aggregator (see sequence.h).
 *
 * The table is a fixed-size chained hash of sequence records per model. Open sequences are also
 * kept on a list in round-robin order: the aggregator walks it and takes, for each worker with
 * free slots, the first queued request of each sequence pinned to that worker whose previous
 * request is done (or, under continuousBatching, has been through a step: it streamed or
 * answered a frame); a sequence served is moved to the back, so no sequence starves. A closed
 * sequence stays in the table as a tombstone (its id, why and when it closed) so that a late
 * request learns what happened (410) instead of silently starting a new sequence under that id,
 * which is what an id never seen does. The oldest tombstones are evicted beyond SEQ_MAX_TOMBSTONES
 * per model: a tombstone costs its id (at most SEQ_ID_MAX bytes), the record and its two timers,
 * under 1 KiB, so the bound caps what a client can make the frontend hold at ~4 MiB per model
 * however many ids it ends; it is far above maxNumSequence (default batchSize x workers), so a
 * closed id is remembered through thousands of later closures. Only an id evicted from there can
 * open a new sequence again.
 *
 * A sequence record is referenced by the jobs attached to it (n_jobs); it is freed only when it
 * is a tombstone nobody points at, or when its model goes away (after every job was failed).
 */
#include "sequence.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "job.h"
#include "log.h"
#include "model_config.h"
#include "otf.h"
#include "worker_pool.h"

#define SEQ_BUCKETS 1024
#define SEQ_MAX_TOMBSTONES 4096

enum seq_state { SEQ_OPEN, SEQ_ENDED, SEQ_CANCELLED, SEQ_IDLE, SEQ_TIMEOUT };

struct seq {
    char *id;
    struct seq_table *t;
    enum seq_state state;
    struct worker *worker; /* pinned */
    struct job_list queue;
    int qlen;
    int inflight;
    int n_jobs; /* attached jobs: queued + running */
    int end_pending;
    int cancel_pending; /* the handler cancelled it (ends as CANCELLED) */
    int event_pending;  /* closed while no worker was connected: the OTF_SEQ_* event to send */
    int64_t created_us;
    struct event *idle_timer;
    struct event *session_timer;
    TAILQ_ENTRY(seq) olink; /* open list, or the tombstone list once closed */
    struct seq *hnext;
};

TAILQ_HEAD(seq_list, seq);

struct seq_table {
    struct worker_group *g;
    const struct model_config *mc;
    int max_batch_delay_ms;
    struct event *batch_timer; /* a partial batch waits for maxBatchDelay */
    struct event *redispatch;  /* a dispatch after the current event (see sequence_job_done) */
    struct seq *buckets[SEQ_BUCKETS];
    struct seq_list open;
    int n_open;
    struct seq_list closed;
    int n_closed;
};

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % SEQ_BUCKETS;
}

static void on_dispatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sequence_dispatch(arg);
}

struct seq_table *sequence_table_new(struct worker_group *g, const struct model_config *mc,
                                     int max_batch_delay_ms)
{
    struct seq_table *t = xcalloc(1, sizeof(*t));
    t->g = g;
    t->mc = mc;
    t->max_batch_delay_ms = max_batch_delay_ms;
    t->batch_timer = evtimer_new(srv->base, on_dispatch, t);
    t->redispatch = event_new(srv->base, -1, 0, on_dispatch, t);
    TAILQ_INIT(&t->open);
    TAILQ_INIT(&t->closed);
    return t;
}

static struct seq *find(struct seq_table *t, const char *id)
{
    for (struct seq *s = t->buckets[hash(id)]; s; s = s->hnext)
        if (!strcmp(s->id, id))
            return s;
    return NULL;
}

static void unhash(struct seq_table *t, struct seq *s)
{
    struct seq **pp = &t->buckets[hash(s->id)];
    while (*pp && *pp != s)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = s->hnext;
}

static void seq_free(struct seq *s)
{
    if (s->idle_timer)
        event_free(s->idle_timer);
    if (s->session_timer)
        event_free(s->session_timer);
    free(s->id);
    free(s);
}

void sequence_request_from_job(const struct job *j, struct seq_request *r)
{
    const struct config *c = &srv->cfg;
    int b;
    memset(r, 0, sizeof(*r));
    r->id = job_header(j, c->ts_header_key_sequence_id);
    const char *v = job_header(j, c->ts_header_key_sequence_start);
    r->start = v && ts_parse_bool(v, &b) == 0 && b;
    v = job_header(j, c->ts_header_key_sequence_end);
    r->end = v && ts_parse_bool(v, &b) == 0 && b;
    v = job_header(j, SEQ_HDR_CANCEL);
    r->cancel = v && ts_parse_bool(v, &b) == 0 && b;
}

int sequence_max_num(const struct model_config *mc, const struct worker_group *g)
{
    if (mc->max_num_sequence > 0)
        return mc->max_num_sequence;
    int w = mc->max_workers > 0 ? mc->max_workers : mc->min_workers > 0 ? mc->min_workers : 1;
    if (w < g->n_workers)
        w = g->n_workers;
    return (g->batch_size > 0 ? g->batch_size : 1) * w;
}

int sequence_open_count(const struct seq_table *t)
{
    return t ? t->n_open : 0;
}

static const char *closed_reason(const struct seq *s, char *buf, size_t n)
{
    switch (s->state) {
    case SEQ_ENDED:
        snprintf(buf, n, "Sequence %s was ended", s->id);
        break;
    case SEQ_CANCELLED:
        snprintf(buf, n, "Sequence %s was cancelled", s->id);
        break;
    case SEQ_IDLE:
        snprintf(buf, n, "Sequence %s expired (idle %d ms)", s->id, s->t->mc->seq_max_idle_ms);
        break;
    case SEQ_TIMEOUT:
        snprintf(buf, n, "Sequence %s expired (session timeout %d ms)", s->id,
                 s->t->mc->seq_timeout_ms);
        break;
    default:
        snprintf(buf, n, "Sequence %s is open", s->id);
    }
    return buf;
}

static void evict_tombstones(struct seq_table *t)
{
    struct seq *s, *tmp;
    TAILQ_FOREACH_SAFE(s, &t->closed, olink, tmp)
    {
        if (t->n_closed <= SEQ_MAX_TOMBSTONES)
            break;
        if (s->n_jobs > 0)
            continue;
        TAILQ_REMOVE(&t->closed, s, olink);
        t->n_closed--;
        unhash(t, s);
        seq_free(s);
    }
}

/* Tells a worker that the sequence is over, so that it drops its state. Every worker of the
 * model shares the state store: when the pinned one is gone (dead, restarting), another one does
 * it, and when none is connected the event waits on the tombstone for the next worker that
 * becomes ready (sequence_worker_ready); else its state would stay in the store for good. */
static void send_event(struct seq *s, int event)
{
    struct worker *w = s->worker;
    if (!w || !worker_takes_jobs(w)) {
        TAILQ_FOREACH(w, &s->t->g->workers, link)
        {
            if (worker_takes_jobs(w))
                break; /* w is NULL when none does */
        }
    }
    if (w) {
        worker_send_seq_event(w, s->id, event);
        s->event_pending = 0;
    } else {
        s->event_pending = event;
    }
}

/* Ends a sequence for good: queued requests fail with the reason, the worker drops the state. */
static void seq_close(struct seq *s, enum seq_state why)
{
    struct seq_table *t = s->t;
    if (s->state != SEQ_OPEN)
        return;
    s->state = why;
    evtimer_del(s->idle_timer);
    evtimer_del(s->session_timer);
    TAILQ_REMOVE(&t->open, s, olink);
    t->n_open--;
    TAILQ_INSERT_TAIL(&t->closed, s, olink);
    t->n_closed++;
    char msg[512];
    closed_reason(s, msg, sizeof(msg));
    LOG_INFO("model %s: %s", t->g->name, msg);
    static const int events[] = {0, OTF_SEQ_END, OTF_SEQ_CANCEL, OTF_SEQ_IDLE, OTF_SEQ_TIMEOUT};
    send_event(s, events[why]);
    struct job *j;
    while ((j = TAILQ_FIRST(&s->queue))) {
        TAILQ_REMOVE(&s->queue, j, link);
        s->qlen--;
        job_fail(j, 410, "SequenceClosedException", msg);
    }
    if (why == SEQ_CANCELLED && s->worker) {
        /* running requests of the sequence stop now (their worker got a cancel frame) */
        struct job *tmp;
        TAILQ_FOREACH_SAFE(j, &s->worker->inflight, link, tmp)
        if (j->seq == s) {
            worker_cancel_job(s->worker, j);
            job_fail(j, 410, "SequenceClosedException", msg);
        }
    }
    evict_tombstones(t);
}

static void on_idle(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct seq *s = arg;
    if (s->qlen == 0 && s->inflight == 0)
        seq_close(s, SEQ_IDLE);
}

static void on_session(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    seq_close(arg, SEQ_TIMEOUT);
}

static void arm_ms(struct event *ev, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

static struct worker *least_loaded(struct seq_table *t)
{
    struct worker *w, *best = NULL;
    int best_n = 0;
    TAILQ_FOREACH(w, &t->g->workers, link)
    {
        if (w->state == WORKER_STOPPING || w->state == WORKER_FAILED)
            continue;
        int n = 0;
        struct seq *s;
        TAILQ_FOREACH(s, &t->open, olink)
        if (s->worker == w)
            n++;
        if (!best || n < best_n) {
            best = w;
            best_n = n;
        }
    }
    return best;
}

static struct seq *seq_new(struct seq_table *t, const char *id)
{
    struct seq *s = xcalloc(1, sizeof(*s));
    s->id = xstrdup(id);
    s->t = t;
    s->state = SEQ_OPEN;
    s->created_us = ts_now_us();
    TAILQ_INIT(&s->queue);
    s->idle_timer = evtimer_new(srv->base, on_idle, s);
    s->session_timer = evtimer_new(srv->base, on_session, s);
    unsigned h = hash(id);
    s->hnext = t->buckets[h];
    t->buckets[h] = s;
    TAILQ_INSERT_TAIL(&t->open, s, olink);
    t->n_open++;
    s->worker = least_loaded(t);
    if (t->mc->seq_timeout_ms > 0)
        arm_ms(s->session_timer, t->mc->seq_timeout_ms);
    return s;
}

static void set_header(struct job *j, const char *k, const char *v)
{
    job_add_header(j, k, v, strlen(v));
}

int sequence_id_check(const char *id, char *msg, size_t msglen)
{
    size_t n = strlen(id);
    if (n > SEQ_ID_MAX) {
        snprintf(msg, msglen, "Sequence id of %zu bytes is longer than %d bytes", n, SEQ_ID_MAX);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f) {
            snprintf(msg, msglen,
                     "Sequence id may contain only printable ASCII characters without spaces");
            return -1;
        }
    return 0;
}

#define SEQ_GEN_PREFIX "ts-seq-"

/* Whether id has the form of the ids we generate: "ts-seq-" and a UUID. */
static int is_generated_id(const char *id)
{
    size_t pl = sizeof(SEQ_GEN_PREFIX) - 1;
    if (strncmp(id, SEQ_GEN_PREFIX, pl) || strlen(id) != pl + 36)
        return 0;
    for (size_t i = 0; i < 36; i++) {
        char c = id[pl + i];
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return 1;
}

int sequence_submit(struct seq_table *t, struct job *j, const struct seq_request *r, int *status,
                    char *msg, size_t msglen)
{
    char gen[48];
    const char *id = r->id && *r->id ? r->id : NULL;
    if (id && sequence_id_check(id, msg, msglen) != 0) {
        *status = 400;
        return TS_E_BAD_INPUT;
    }
    struct seq *s = id ? find(t, id) : NULL;

    if (r->cancel) {
        if (!s) {
            *status = 404;
            snprintf(msg, msglen, "Sequence %s not found", id ? id : "(none given)");
            return TS_E_BAD_INPUT;
        }
        if (s->state != SEQ_OPEN) {
            *status = 410;
            closed_reason(s, msg, msglen);
            return TS_E_BAD_INPUT;
        }
        seq_close(s, SEQ_CANCELLED);
        snprintf(msg, msglen, "Sequence %s cancelled", s->id);
        free(j->seq_id);
        j->seq_id = xstrdup(s->id);
        return 1;
    }
    /* A request without an id, with the start flag, or with a client-chosen id never seen (as
     * TorchServe's frontend does: clients and sticky routers choose ids) opens a sequence. An id
     * that is a tombstone was closed: without the start flag it gets 410, never a silent new
     * sequence; nor does an unknown id of our own making (above). */
    /* ... unless the instances share their state (state_store=redis://): then it may live on
     * in the store, and the handler finds out (the answer says which) */
    if (id && !s && !r->start && is_generated_id(id) && !srv->cfg.state_store) {
        /* a server made this id and this one does not know it: its sequence lived in an
         * instance that restarted or died (or was evicted from the tombstones). Starting it
         * afresh would answer from an empty state as if nothing happened. */
        *status = 404;
        snprintf(msg, msglen,
                 "Sequence %s not found: the server that made this id no longer holds it; start "
                 "a new sequence (without an id, or with %s: true)",
                 id, srv->cfg.ts_header_key_sequence_start);
        return TS_E_BAD_INPUT;
    }
    int start = r->start || !id || !s;
    /* What the handler is told, as TorchServe's frontend tells it: start for an id the server
     * makes, or when the client said so. A client-chosen id that is new here opens a sequence
     * all the same, but its handler sees no start flag: it may find the sequence's state (a
     * shared state backend) and continue it. The answer says which (sequence_submit's caller,
     * job.seq_new). */
    int tell_start = r->start || !id;
    if (!id) {
        char u[37];
        ts_uuid_secure(u);
        snprintf(gen, sizeof(gen), SEQ_GEN_PREFIX "%s", u);
        id = gen;
    }
    if (start) {
        if (s && s->state == SEQ_OPEN) {
            *status = 409;
            snprintf(msg, msglen, "Sequence %s already started", id);
            return TS_E_EXISTS;
        }
        if (t->n_open >= sequence_max_num(t->mc, t->g)) {
            *status = 429;
            snprintf(msg, msglen,
                     "Too many open sequences for model %s (maxNumSequence %d); retry later",
                     t->g->name, sequence_max_num(t->mc, t->g));
            return TS_E_QUEUE_FULL;
        }
        if (worker_pool_alive(t->g) == 0) {
            *status = 503;
            snprintf(msg, msglen, "Model \"%s\" has no worker to serve inference request.",
                     t->g->name);
            return TS_E_NO_WORKER;
        }
        if (s) { /* an explicit restart of a closed id: forget the tombstone */
            if (s->n_jobs == 0) {
                TAILQ_REMOVE(&t->closed, s, olink);
                t->n_closed--;
                unhash(t, s);
                seq_free(s);
            } else {
                *status = 409;
                snprintf(msg, msglen, "Sequence %s is still closing; retry", id);
                return TS_E_EXISTS;
            }
        }
        s = seq_new(t, id);
    } else {
        if (s->state != SEQ_OPEN) {
            *status = 410;
            closed_reason(s, msg, msglen);
            return TS_E_BAD_INPUT;
        }
    }
    if (s->end_pending) {
        *status = 410;
        snprintf(msg, msglen, "Sequence %s is ending: its end was already requested", s->id);
        return TS_E_BAD_INPUT;
    }
    int qmax = t->mc->max_seq_job_queue > 0 ? t->mc->max_seq_job_queue : 1;
    if (s->qlen >= qmax) {
        *status = 429;
        snprintf(msg, msglen, "Sequence %s job queue is full (maxSequenceJobQueueSize %d)", s->id,
                 qmax);
        return TS_E_QUEUE_FULL;
    }

    /* the worker always sees the canonical names */
    set_header(j, SEQ_HDR_ID, s->id);
    if (tell_start)
        set_header(j, SEQ_HDR_START, "true");
    else if (start)
        set_header(j, SEQ_HDR_NEW, "true");
    j->seq_new = start;
    if (r->end) {
        set_header(j, SEQ_HDR_END, "true");
        s->end_pending = 1;
        j->seq_end = 1;
    }
    free(j->seq_id);
    j->seq_id = xstrdup(s->id);
    job_ref(j);
    j->seq = s;
    j->state = JOB_QUEUED;
    TAILQ_INSERT_TAIL(&s->queue, j, link);
    s->qlen++;
    s->n_jobs++;
    evtimer_del(s->idle_timer);
    sequence_dispatch(t);
    return 0;
}

const char *sequence_error_type(int status)
{
    switch (status) {
    case 404:
        return "SequenceNotFoundException";
    case 409:
        return "ConflictException";
    case 410:
        return "SequenceClosedException";
    case 429:
        return "TooManyRequestsException";
    default:
        return "ServiceUnavailableException";
    }
}

void sequence_dequeue(struct job *j)
{
    struct seq *s = j->seq;
    TAILQ_REMOVE(&s->queue, j, link);
    s->qlen--;
}

void sequence_frame_seen(struct job *j, const struct otf_prediction *p)
{
    /* its first frame: under continuous batching the sequence's next request may join now
     * (pick_for_worker); the dispatch this frame's worker asked for ran before it was counted */
    if (j->frames == 1 && j->seq->qlen > 0 && j->seq->t->g->continuous)
        event_active(j->seq->t->redispatch, EV_TIMEOUT, 1);
    const struct otf_kv *kv = otf_find_kv(p->headers, p->n_headers, SEQ_HDR_CANCEL);
    if (kv && !otf_str_eq(kv->val, "false")) {
        j->seq->cancel_pending = 1;
        j->seq_end = 1;
    }
    kv = otf_find_kv(p->headers, p->n_headers, SEQ_HDR_END);
    if (kv && !otf_str_eq(kv->val, "false"))
        j->seq_end = 1;
}

void sequence_job_done(struct job *j, int was_running)
{
    struct seq *s = j->seq;
    j->seq = NULL;
    s->n_jobs--;
    if (was_running)
        s->inflight--;
    if (s->state != SEQ_OPEN) {
        if (s->n_jobs == 0)
            evict_tombstones(s->t);
        return;
    }
    if (j->seq_end)
        s->end_pending = 1;
    if (s->end_pending && s->inflight == 0)
        seq_close(s, s->cancel_pending ? SEQ_CANCELLED : SEQ_ENDED);
    else if (s->qlen == 0 && s->inflight == 0 && s->t->mc->seq_max_idle_ms > 0)
        arm_ms(s->idle_timer, s->t->mc->seq_max_idle_ms);
    else if (was_running && s->qlen > 0)
        /* Its next request may go now. The worker asked for a dispatch when it freed the slot,
         * but that was before this job let go of its sequence (a cancelled job's client is gone
         * and no later frame will come to ask again), so ask once more, after the current event:
         * we may be inside a worker_pool or dispatch call. */
        event_active(s->t->redispatch, EV_TIMEOUT, 1);
}

/* Whether each request of s running on w has been through a step (it streamed or answered a
 * frame): only then may the sequence's next request join it (see sequence.h). */
static int all_stepped(const struct seq *s, struct worker *w)
{
    const struct job *j;
    TAILQ_FOREACH(j, &w->inflight, link)
    if (j->seq == s && j->frames == 0)
        return 0;
    return 1;
}

/* The sequences whose next request may go to w now, oldest request first in the round-robin
 * order: at most new_max that have nothing running (new_max: the sequences w may still take),
 * and at most max in all; *oldest gets the enqueue time of the oldest of them. A sequence with
 * a request running goes again only when the handler keeps requests across steps (joinable),
 * and only once that request has been through a step. */
static int pick_for_worker(struct seq_table *t, struct worker *w, struct seq **pick, int max,
                           int new_max, int joinable, int64_t *oldest)
{
    int n = 0;
    struct seq *s;
    *oldest = INT64_MAX;
    TAILQ_FOREACH(s, &t->open, olink)
    {
        if (n == max)
            break;
        if (!s->worker)
            s->worker = w;
        if (s->worker != w || s->qlen == 0)
            continue;
        if (s->inflight > 0 ? !joinable || !all_stepped(s, w) : new_max <= 0)
            continue;
        if (s->inflight == 0)
            new_max--;
        pick[n++] = s;
        if (TAILQ_FIRST(&s->queue)->created_us < *oldest)
            *oldest = TAILQ_FIRST(&s->queue)->created_us;
    }
    return n;
}

/* Sequences with a request running on w. */
static int running_on(struct seq_table *t, struct worker *w)
{
    int n = 0;
    struct seq *s;
    TAILQ_FOREACH(s, &t->open, olink)
    n += s->worker == w && s->inflight > 0;
    return n;
}

void sequence_dispatch(struct seq_table *t)
{
    struct worker_group *g = t->g;
    struct worker *w;
    int bs = g->batch_size > 0 ? g->batch_size : 1;
    /* continuous batching: a sequence's next request joins its running one (TorchServe polls
     * the sequence's queue after every step), up to TorchServe's 2 x batchSize requests in a
     * worker, while batchSize still bounds the sequences a worker serves at once */
    int joinable = g->continuous && t->mc->continuous_batching;
    TAILQ_FOREACH(w, &g->workers, link)
    {
        if (!worker_takes_jobs(w))
            continue;
        if (!g->continuous && w->n_inflight > 0)
            continue;
        int free_slots = (joinable ? 2 * bs : bs) - w->n_inflight;
        /* at most one request per open sequence: the arrays are sized by that, on the heap, as
         * batchSize is a client's number (the register API) */
        int max = free_slots < t->n_open ? free_slots : t->n_open;
        if (max <= 0)
            continue;
        int new_max = bs - (g->continuous ? running_on(t, w) : 0);
        struct seq **pick = xmalloc(sizeof(*pick) * (size_t)max);
        int64_t oldest;
        int n = pick_for_worker(t, w, pick, max, new_max, joinable, &oldest);
        if (n > 0 && n < free_slots && !g->continuous && g->batch_size > 1 && w->n_inflight == 0) {
            /* a partial batch waits for maxBatchDelay from its oldest request */
            int64_t due = oldest + (int64_t)t->max_batch_delay_ms * 1000, now = ts_now_us();
            if (now < due) {
                if (!evtimer_pending(t->batch_timer, NULL)) {
                    struct timeval tv = {(due - now) / 1000000, (due - now) % 1000000};
                    evtimer_add(t->batch_timer, &tv);
                }
                n = 0;
            }
        }
        if (n == 0) {
            free(pick);
            continue;
        }
        struct job **batch = xmalloc(sizeof(*batch) * (size_t)n);
        for (int i = 0; i < n; i++) {
            struct seq *s = pick[i];
            batch[i] = TAILQ_FIRST(&s->queue);
            TAILQ_REMOVE(&s->queue, batch[i], link);
            s->qlen--;
            s->inflight++;
            /* round robin: the sequence just served goes to the back */
            TAILQ_REMOVE(&t->open, s, olink);
            TAILQ_INSERT_TAIL(&t->open, s, olink);
        }
        worker_send_batch(w, batch, n);
        free(batch);
        free(pick);
    }
}

void sequence_worker_gone(struct seq_table *t, struct worker *w)
{
    struct seq *s;
    TAILQ_FOREACH(s, &t->open, olink)
    if (s->worker == w)
        s->worker = NULL; /* re-pinned at the next dispatch */
    TAILQ_FOREACH(s, &t->closed, olink)
    if (s->worker == w)
        s->worker = NULL;
}

void sequence_worker_ready(struct seq_table *t, struct worker *w)
{
    struct seq *s;
    TAILQ_FOREACH(s, &t->closed, olink)
    if (s->event_pending) {
        LOG_INFO("model %s: sequence %s was closed while no worker was up: worker %d drops its "
                 "state",
                 t->g->name, s->id, w->id);
        worker_send_seq_event(w, s->id, s->event_pending);
        s->event_pending = 0;
    }
}

void sequence_fail_queued(struct seq_table *t)
{
    struct seq *s;
    TAILQ_FOREACH(s, &t->open, olink)
    {
        struct job *j;
        while ((j = TAILQ_FIRST(&s->queue))) {
            TAILQ_REMOVE(&s->queue, j, link);
            s->qlen--;
            job_fail(j, 503, "ServiceUnavailableException", "Model was unregistered");
        }
    }
}

void sequence_table_free(struct seq_table *t)
{
    sequence_fail_queued(t);
    for (int i = 0; i < SEQ_BUCKETS; i++) {
        struct seq *s = t->buckets[i];
        while (s) {
            struct seq *n = s->hnext;
            seq_free(s);
            s = n;
        }
    }
    event_free(t->batch_timer);
    event_free(t->redispatch);
    free(t);
}
