/*
 * ctx_state: the handler state API (ts_state_get/put/del, handler.h) and the worker's side of
 * sequence state around a step: the store opened at first use from model-config.yaml, the commit
 * of a step's writes before its responses go out, turning unsent predictions into 507s when that
 * commit fails, and dropping a sequence's state when the sequence ends.
 *
 * The store itself (LRU over LMDB) is state.c; this file only ties it to struct ts_ctx and its
 * requests. A request's sequence id is its ts_request_sequence_id header.
 */
#include "ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* How long a store that could not be opened is not tried again: a full disk makes each try cost
 * a few system calls and a log line, and the disk may have room again a moment later. */
#define STATE_RETRY_US 1000000

/* The store, opened at first use from model-config.yaml's handler.cache.capacity,
 * handler.state_sync and handler.state_map_size_mb; NULL if it cannot be opened (logged, and
 * tried again at most once per STATE_RETRY_US). */
static struct state_store *store(struct ts_ctx *c)
{
    if (c->state || (c->state_failed_us && ts_now_us() - c->state_failed_us < STATE_RETRY_US))
        return c->state;
    long cap = ts_config_get_long(c, "handler.cache.capacity", STATE_DEFAULT_CAPACITY);
    long map_mb = ts_config_get_long(c, "handler.state_map_size_mb", STATE_DEFAULT_MAP_SIZE >> 20);
    struct state_opts o = {
        .capacity = cap >= 1 ? (size_t)cap : STATE_DEFAULT_CAPACITY,
        .map_size =
            map_mb >= 1 && map_mb <= (1L << 20) ? (size_t)map_mb << 20 : STATE_DEFAULT_MAP_SIZE,
    };
    const char *sync = ts_config_get(c, "handler.state_sync");
    if (sync && ts_parse_bool(sync, &o.sync)) {
        LOG_WARN("model-config.yaml: handler.state_sync: \"%s\" is not true/false; not syncing",
                 sync);
        o.sync = 0;
    }
    char err[512];
    if (c->state_redis) {
        /* shared with every instance: a model's keys are "<name>@<version>:<sequence id>" (the
         * state directory's name); a value lives as long as its sequence may stay idle */
        const char *slash = c->state_dir ? strrchr(c->state_dir, '/') : NULL;
        o.redis_url = c->state_redis;
        o.redis_prefix = slash ? slash + 1 : c->state_dir ? c->state_dir : ts_model_name(c);
        o.redis_ttl_ms = ts_config_get_long(c, "sequenceMaxIdleMSec", 0);
        if (o.redis_ttl_ms < 0)
            o.redis_ttl_ms = 0;
    } else if (!c->state_dir) {
        LOG_WARN("no --state-dir: sequence state is kept in memory only and is lost with the "
                 "worker");
    }
    if (state_open(&c->state, c->state_dir, &o, err, sizeof(err))) {
        LOG_ERROR("%s", err);
        c->state_failed_us = ts_now_us();
        return NULL;
    }
    if (c->state_redis)
        LOG_INFO("state store %s, keys %s:<sequence id>, %s", c->state_redis, o.redis_prefix,
                 o.redis_ttl_ms > 0 ? "expiring after sequenceMaxIdleMSec" : "never expiring");
    else
        LOG_INFO("state store %s: LRU capacity %zu, map %zu MiB, %s",
                 c->state_dir ? c->state_dir : "(memory)", o.capacity, o.map_size >> 20,
                 o.sync ? "synced commits" : "MDB_NOSYNC");
    return c->state;
}

/* The request's sequence id and the store, or NULL with *rc set. A start request first drops
 * whatever an earlier sequence with the same id left behind (once per request). */
static const char *state_key(struct ts_ctx *c, size_t idx, struct state_store **st, int *rc)
{
    struct wreq *r = ctx_req_at(c, idx);
    const char *key = r ? ts_sequence_id(c, idx) : NULL;
    *st = NULL;
    if (!key || !*key) {
        *rc = -EINVAL;
        if (r)
            LOG_REQ(LOG_LEVEL_ERROR, r->id, "state API used by a request without a sequence id");
        return NULL;
    }
    if (!(*st = store(c))) {
        *rc = -EIO;
        return NULL;
    }
    if (!r->state_fresh) {
        r->state_fresh = 1;
        const char *start = ts_get_header(c, idx, "ts_request_sequence_start");
        const char *opened = ts_get_header(c, idx, TS_SEQ_NEW_HEADER);
        int b = 0;
        const void *v;
        size_t len;
        if (start && ts_parse_bool(start, &b) == 0 && b && state_get(*st, key, &v, &len) == 0)
            state_del(*st, key);
        else if (opened && ts_parse_bool(opened, &b) == 0 && b &&
                 state_get(*st, key, &v, &len) == 0)
            /* this instance opened the sequence (a client-chosen id it had not seen, or any id
             * with a shared state store) and found its state: a continuation, which the
             * answer says, instead of the frontend's ts_request_sequence_start: true */
            ts_set_header(c, idx, "ts_request_sequence_start", "false");
    }
    *rc = 0;
    return key;
}

const void *ts_state_get(struct ts_ctx *ctx, size_t idx, size_t *len)
{
    struct state_store *st;
    int rc;
    const void *v;
    size_t n = 0;
    if (len)
        *len = 0;
    const char *key = state_key(ctx, idx, &st, &rc);
    if (key && (rc = state_get(st, key, &v, &n)) == 0) {
        /* a copy per request: a later get may evict the LRU entry under the handler */
        struct wreq *r = ctx->cur[idx];
        free(r->state_copy);
        r->state_copy = xmalloc(n + 1);
        memcpy(r->state_copy, v, n);
        ((char *)r->state_copy)[n] = '\0';
        if (len)
            *len = n;
        return r->state_copy;
    }
    if (rc != -ENOENT && rc != -EINVAL)
        LOG_REQ(LOG_LEVEL_ERROR, ctx->cur[idx]->id, "state get: %s", state_strerror(rc));
    errno = rc == -ENOENT ? ENOENT : EIO;
    return NULL;
}

int ts_state_put(struct ts_ctx *ctx, size_t idx, const void *data, size_t len)
{
    struct state_store *st;
    int rc;
    const char *key = state_key(ctx, idx, &st, &rc);
    if (key && (rc = state_put(st, key, data, len)))
        LOG_REQ(LOG_LEVEL_ERROR, ctx->cur[idx]->id, "state put: %s", state_strerror(rc));
    return rc;
}

int ts_state_del(struct ts_ctx *ctx, size_t idx)
{
    struct state_store *st;
    int rc;
    const char *key = state_key(ctx, idx, &st, &rc);
    if (key && (rc = state_del(st, key)))
        LOG_REQ(LOG_LEVEL_ERROR, ctx->cur[idx]->id, "state del: %s", state_strerror(rc));
    return rc;
}

/* Sets a counter to an absolute value (ts_counter_add keeps running totals). */
static void counter_set(struct ts_ctx *c, const char *name, int64_t value)
{
    int64_t cur = 0;
    for (size_t i = 0; i < c->n_counters; i++)
        if (!strcmp(c->counters[i].name, name))
            cur = c->counters[i].total;
    ts_counter_add(c, name, value - cur);
}

int ctx_state_commit(struct ts_ctx *c)
{
    if (!state_dirty(c->state))
        return 0;
    int rc = state_commit(c->state);
    if (rc) {
        if (c->state_redis)
            LOG_ERROR("state commit failed: %s", state_last_error(c->state));
        else
            LOG_ERROR("state commit failed: %s (raise handler.state_map_size_mb if the map is "
                      "full)",
                      state_strerror(rc));
        return rc;
    }
    /* LMDB write-through totals, on later responses as x-ts-worker-state_writes /
     * x-ts-worker-state_commits / x-ts-worker-state_us (put + del + commit time) */
    struct state_stats st;
    state_get_stats(c->state, &st);
    counter_set(c, "state_writes", (int64_t)st.writes);
    counter_set(c, "state_commits", (int64_t)st.commits);
    counter_set(c, "state_us", st.commit_us);
    return 0;
}

/* A request answered with the failure gets nothing more: one in the current handle call (a
 * ts_flush mid-call) sees ts_is_cancelled, one held for a later step is freed at that step
 * without an answer (a paused one is stepped again for that). */
static void drop_answered(struct ts_ctx *c, const char *id)
{
    for (size_t i = 0; i < c->ncur; i++)
        if (!strcmp(id, c->cur[i]->id))
            c->cur[i]->cancelled = 1;
    for (struct wreq *r = c->held_head; r; r = r->next)
        if (!strcmp(id, r->id)) {
            r->cancelled = 1;
            r->paused = 0;
        }
}

/* The record of the prediction at off in c->unsent (ctx.h): its id, and whether it streamed. */
static const char *unsent_at(const struct ts_ctx *c, size_t off, int *streamed)
{
    *streamed = c->unsent.data[off] != 0;
    return (const char *)c->unsent.data + off + 1;
}

void ctx_fail_uncommitted(struct ts_ctx *c, int rc)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "could not store the sequence state: %s", state_strerror(rc));
    char *body = ctx_error_json(507, msg);
    struct otf_kv last = {.key = otf_s(OTF_STREAM_NEXT), .val = otf_s("false")};
    buf_reset(&c->out);
    c->out_open = 0;
    c->n_out_ids = 0;
    if (!c->unsent.len) {
        free(body);
        state_forget_cache(c->state);
        return;
    }
    /* one 507 per request, in one frame: it streamed if any of its predictions did */
    otf_encode_response_begin(&c->out, 200, otf_s(CTX_PREDICTION_MSG));
    for (size_t off = 0; off < c->unsent.len;) {
        int streamed;
        const char *id = unsent_at(c, off, &streamed);
        size_t next = off + 2 + strlen(id);
        int seen = 0;
        for (size_t o = 0; o < off && !seen;) {
            int s;
            const char *earlier = unsent_at(c, o, &s);
            seen = !strcmp(earlier, id);
            o += 2 + strlen(earlier);
        }
        for (size_t o = next; o < c->unsent.len && !seen;) {
            int s;
            const char *later = unsent_at(c, o, &s);
            if (!strcmp(later, id))
                streamed |= s;
            o += 2 + strlen(later);
        }
        if (!seen) {
            struct otf_prediction e = {
                .id = otf_s(id),
                .ctype = otf_s("application/json"),
                .status = 507,
                .phrase = otf_s(""),
                .headers = streamed ? &last : NULL,
                .n_headers = streamed ? 1 : 0,
                .body = otf_s(body),
            };
            otf_encode_prediction(&c->out, &e);
            drop_answered(c, id);
        }
        off = next;
    }
    otf_encode_list_end(&c->out);
    buf_reset(&c->unsent);
    free(body);
    state_forget_cache(c->state);
}

void ctx_state_drop(struct ts_ctx *c, const char *seq_id)
{
    if (!seq_id || !*seq_id)
        return;
    /* a sequence model's worker may get the event before any request used the state API
     * (its predecessor wrote the state); any other model has nothing to drop */
    const char *seqb = ts_config_get(c, "sequenceBatching");
    int b = 0;
    if (!c->state && !(c->state_dir && seqb && ts_parse_bool(seqb, &b) == 0 && b))
        return;
    if (!store(c))
        return;
    int rc = state_del(c->state, seq_id);
    if (rc == 0)
        rc = state_commit(c->state);
    if (rc)
        LOG_ERROR("sequence %s: dropping its state: %s", seq_id, state_strerror(rc));
}
