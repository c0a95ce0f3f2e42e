/*
 * state_redis: sequence state in Redis (see state_redis.h).
 *
 * hiredis, not a RESP parser of our own: the replies come from a server the operator runs, but
 * parsing them is still parsing, and Debian's libhiredis is the parser Redis' own tools use,
 * with binary-safe commands ("%b"), timeouts and a blocking API that fits the worker's one
 * thread (a step's writes are one round trip; a get is one). The connection is opened at once,
 * so that a wrong URL fails the first state access with a message, and reopened when it broke:
 * every operation retries once on a new connection (SET, DEL and GET may run twice; a
 * transaction whose EXEC never answered is sent again whole, which leaves the same values).
 */
#include "state_redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define CONNECT_TIMEOUT_MS 2000
#define COMMAND_TIMEOUT_MS 5000

struct op {
    char *key; /* prefixed */
    size_t klen;
    char *val; /* NULL: a removal */
    size_t vlen;
};

struct state_redis {
    redisContext *c;
    char *host, *password;
    int port, db;
    char *prefix;
    long ttl_ms;
    struct op *ops;
    size_t n_ops, cap_ops;
    char err[256];
};

static int fail(struct state_redis *r, int rc, const char *fmt, const char *what)
{
    snprintf(r->err, sizeof(r->err), fmt, what ? what : "");
    return rc;
}

/* redis://[:PASSWORD@]HOST:PORT[/DB] */
static int parse_url(struct state_redis *r, const char *url, char *err, size_t errlen)
{
    const char *p = url;
    if (strncmp(p, "redis://", 8)) {
        snprintf(err, errlen, "state store %s: expected redis://HOST:PORT[/DB]", url);
        return -EINVAL;
    }
    p += 8;
    const char *at = strchr(p, '@');
    if (at) {
        if (*p != ':') {
            snprintf(err, errlen, "state store %s: expected redis://:PASSWORD@HOST:PORT", url);
            return -EINVAL;
        }
        r->password = xstrndup(p + 1, (size_t)(at - p - 1));
        p = at + 1;
    }
    const char *colon = strrchr(p, ':');
    const char *slash = strchr(p, '/');
    long port, db = 0;
    char *portstr = colon ? xstrndup(colon + 1, slash && slash > colon ? (size_t)(slash - colon - 1)
                                                                       : strlen(colon + 1))
                          : NULL;
    int bad = !colon || colon == p || ts_parse_long(portstr, 1, 65535, &port) ||
              (slash && slash < colon) || (slash && ts_parse_long(slash + 1, 0, 1 << 20, &db));
    free(portstr);
    if (bad) {
        snprintf(err, errlen, "state store %s: expected redis://HOST:PORT[/DB]", url);
        return -EINVAL;
    }
    r->host = xstrndup(p, (size_t)(colon - p));
    r->port = (int)port;
    r->db = (int)db;
    return 0;
}

static int connect_now(struct state_redis *r)
{
    if (r->c)
        redisFree(r->c);
    struct timeval ct = {CONNECT_TIMEOUT_MS / 1000, (CONNECT_TIMEOUT_MS % 1000) * 1000};
    r->c = redisConnectWithTimeout(r->host, r->port, ct);
    if (!r->c || r->c->err) {
        int rc = r->c && r->c->err == REDIS_ERR_IO && errno ? -errno : -ECONNREFUSED;
        snprintf(r->err, sizeof(r->err), "cannot connect to Redis at %s:%d: %s", r->host, r->port,
                 r->c ? r->c->errstr : "out of memory");
        if (r->c)
            redisFree(r->c);
        r->c = NULL;
        return rc;
    }
    struct timeval t = {COMMAND_TIMEOUT_MS / 1000, (COMMAND_TIMEOUT_MS % 1000) * 1000};
    redisSetTimeout(r->c, t);
    redisReply *rep;
    if (r->password) {
        rep = redisCommand(r->c, "AUTH %s", r->password);
        int ok = rep && rep->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(r->err, sizeof(r->err), "Redis AUTH: %s", rep ? rep->str : r->c->errstr);
        if (rep)
            freeReplyObject(rep);
        if (!ok)
            return -EACCES;
    }
    if (r->db) {
        rep = redisCommand(r->c, "SELECT %d", r->db);
        int ok = rep && rep->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(r->err, sizeof(r->err), "Redis SELECT %d: %s", r->db,
                     rep ? rep->str : r->c->errstr);
        if (rep)
            freeReplyObject(rep);
        if (!ok)
            return -EINVAL;
    }
    return 0;
}

/* A connection that works: the one we have, or a new one after it broke. */
static int usable(struct state_redis *r)
{
    if (r->c && !r->c->err)
        return 0;
    return connect_now(r);
}

int state_redis_open(struct state_redis **out, const char *url, const char *prefix, long ttl_ms,
                     char *err, size_t errlen)
{
    struct state_redis *r = xcalloc(1, sizeof(*r));
    *out = NULL;
    int rc = parse_url(r, url, err, errlen);
    if (rc == 0 && (rc = connect_now(r)) != 0)
        snprintf(err, errlen, "state store %s: %s", url, r->err);
    if (rc) {
        state_redis_close(r);
        return rc;
    }
    r->prefix = xstrdup(prefix);
    r->ttl_ms = ttl_ms;
    *out = r;
    return 0;
}

static void drop_ops(struct state_redis *r)
{
    for (size_t i = 0; i < r->n_ops; i++) {
        free(r->ops[i].key);
        free(r->ops[i].val);
    }
    r->n_ops = 0;
}

void state_redis_close(struct state_redis *r)
{
    if (!r)
        return;
    drop_ops(r);
    free(r->ops);
    if (r->c)
        redisFree(r->c);
    free(r->host);
    free(r->password);
    free(r->prefix);
    free(r);
}

static char *full_key(const struct state_redis *r, const char *key, size_t *len)
{
    char *k = xasprintf("%s:%s", r->prefix, key);
    *len = strlen(k);
    return k;
}

int state_redis_get(struct state_redis *r, const char *key, char **val, size_t *len)
{
    size_t klen;
    char *k = full_key(r, key, &klen);
    int rc = -EIO;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rc = usable(r)))
            continue;
        redisReply *rep = redisCommand(r->c, "GET %b", k, klen);
        if (!rep) {
            rc = fail(r, -EIO, "Redis GET: %s", r->c->errstr);
            continue;
        }
        if (rep->type == REDIS_REPLY_NIL) {
            rc = -ENOENT;
        } else if (rep->type == REDIS_REPLY_STRING) {
            *val = xmalloc((size_t)rep->len + 1);
            memcpy(*val, rep->str, (size_t)rep->len);
            (*val)[rep->len] = '\0';
            *len = (size_t)rep->len;
            rc = 0;
        } else {
            rc = fail(r, -EIO, "Redis GET: %s",
                      rep->type == REDIS_REPLY_ERROR ? rep->str : "not a string value");
        }
        freeReplyObject(rep);
        break;
    }
    free(k);
    return rc;
}

static void stage(struct state_redis *r, const char *key, const void *val, size_t len)
{
    if (r->n_ops == r->cap_ops) {
        r->cap_ops = r->cap_ops ? 2 * r->cap_ops : 8;
        r->ops = xrealloc(r->ops, r->cap_ops * sizeof(*r->ops));
    }
    struct op *o = &r->ops[r->n_ops++];
    o->key = full_key(r, key, &o->klen);
    o->val = NULL;
    o->vlen = len;
    if (val) {
        o->val = xmalloc(len ? len : 1);
        if (len)
            memcpy(o->val, val, len);
    }
}

void state_redis_stage_set(struct state_redis *r, const char *key, const void *val, size_t len)
{
    stage(r, key, val ? val : "", len);
}

void state_redis_stage_del(struct state_redis *r, const char *key)
{
    stage(r, key, NULL, 0);
}

int state_redis_pending(const struct state_redis *r)
{
    return r && r->n_ops > 0;
}

/* MULTI, the staged writes, EXEC: n + 2 replies, the last one EXEC's array of results. */
static int send_transaction(struct state_redis *r)
{
    redisAppendCommand(r->c, "MULTI");
    for (size_t i = 0; i < r->n_ops; i++) {
        const struct op *o = &r->ops[i];
        if (!o->val)
            redisAppendCommand(r->c, "DEL %b", o->key, o->klen);
        else if (r->ttl_ms > 0)
            redisAppendCommand(r->c, "SET %b %b PX %ld", o->key, o->klen, o->val, o->vlen,
                               r->ttl_ms);
        else
            redisAppendCommand(r->c, "SET %b %b", o->key, o->klen, o->val, o->vlen);
    }
    redisAppendCommand(r->c, "EXEC");
    int rc = 0;
    for (size_t i = 0; i < r->n_ops + 2; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->c, (void **)&rep) != REDIS_OK || !rep)
            return fail(r, -EIO, "Redis transaction: %s", r->c->errstr);
        int last = i == r->n_ops + 1;
        if (rep->type == REDIS_REPLY_ERROR && !rc)
            rc = fail(r, -EIO, "Redis transaction: %s", rep->str);
        else if (last && rep->type != REDIS_REPLY_ARRAY && !rc)
            rc = fail(r, -EIO, "Redis transaction: %s", "EXEC did not run the writes");
        else if (last)
            for (size_t k = 0; k < rep->elements && !rc; k++)
                if (rep->element[k]->type == REDIS_REPLY_ERROR)
                    rc = fail(r, -EIO, "Redis transaction: %s", rep->element[k]->str);
        freeReplyObject(rep);
    }
    return rc;
}

int state_redis_commit(struct state_redis *r)
{
    if (!r || !r->n_ops)
        return 0;
    int rc = -EIO;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rc = usable(r)))
            continue;
        rc = send_transaction(r);
        if (rc == 0 || !r->c->err) /* done, or Redis refused it: sending again would not help */
            break;
    }
    drop_ops(r);
    return rc;
}

const char *state_redis_error(const struct state_redis *r)
{
    return r ? r->err : "";
}
