/*
 * state: LRU + LMDB write-through (see state.h).
 *
 * The LRU is a chained hash of entries that are also on a doubly linked recency list; the
 * least recently used entry is evicted when a put or a miss-load goes beyond capacity. Eviction
 * never loses data because every value is in LMDB (staged or committed): a later miss reads it
 * back, through the staged write transaction when one is open (LMDB allows one transaction per
 * thread, and the write transaction sees its own uncommitted writes).
 *
 * LMDB notes that shape this file (see the engineering notes, LMDB section):
 *  - the default map size is 1 MiB: always set it;
 *  - the data file descriptor lacks O_CLOEXEC in 0.9.24: set it right after opening, so a
 *    process we exec does not inherit it;
 *  - a worker killed while it held the write lock leaves a robust mutex that the next writer
 *    recovers; its reader slot is reclaimed by mdb_reader_check at open;
 *  - MDB_NOSYNC writes still go through write() into the page cache, so they survive the death
 *    of the process (what a respawn needs); only a machine crash can lose the last commits;
 *  - the lock file is written through a shared map, after an ftruncate that allocates nothing:
 *    on a full disk the first store into a page without a block is a SIGBUS, at open (the
 *    header) or later (a reader slot further in). lock_file_backed() gives every page of it a
 *    block before LMDB maps it, so a full disk is an error at open instead (ENOSPC). Data pages
 *    are written with pwrite (no MDB_WRITEMAP), which fails cleanly.
 */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state_redis.h"
#include "util.h"

struct entry {
    struct entry *hnext;
    struct entry *prev, *next; /* recency list: head = most recent */
    char *key;
    void *val;
    size_t len;
    int dirty; /* Redis: written in the current step, not committed yet */
};

struct state_store {
    struct state_redis *redis; /* shared state; then env is NULL */
    MDB_env *env;              /* NULL: memory only (or Redis) */
    MDB_dbi dbi;
    MDB_txn *wtxn; /* staged writes */
    size_t max_key;
    size_t capacity;
    struct entry **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    struct entry *head, *tail;
    struct state_stats stats;
};

static int mdb_err(int rc)
{
    return rc > 0 ? -rc : rc; /* LMDB returns errno values positive, its own codes negative */
}

const char *state_strerror(int err)
{
    if (err <= MDB_KEYEXIST && err >= MDB_LAST_ERRCODE)
        return mdb_strerror(err);
    if (err < 0 && err > TS_E_BASE)
        return strerror(-err);
    return ts_strerror(err);
}

/* ---------------------------------------------------------------- LRU */

static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static struct entry **slot(struct state_store *st, const char *key)
{
    struct entry **pp = &st->buckets[hash_key(key) & (st->nbuckets - 1)];
    while (*pp && strcmp((*pp)->key, key))
        pp = &(*pp)->hnext;
    return pp;
}

static void list_unlink(struct state_store *st, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        st->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(struct state_store *st, struct entry *e)
{
    e->prev = NULL;
    e->next = st->head;
    if (st->head)
        st->head->prev = e;
    st->head = e;
    if (!st->tail)
        st->tail = e;
}

static void entry_free(struct entry *e)
{
    free(e->key);
    free(e->val);
    free(e);
}

static void lru_remove(struct state_store *st, const char *key)
{
    struct entry **pp = slot(st, key);
    struct entry *e = *pp;
    if (!e)
        return;
    *pp = e->hnext;
    list_unlink(st, e);
    st->count--;
    entry_free(e);
}

static void grow(struct state_store *st)
{
    size_t n = st->nbuckets * 2;
    struct entry **b = xcalloc(n, sizeof(*b));
    for (size_t i = 0; i < st->nbuckets; i++) {
        struct entry *e = st->buckets[i];
        while (e) {
            struct entry *next = e->hnext;
            size_t h = hash_key(e->key) & (n - 1);
            e->hnext = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = n;
}

static void evict(struct state_store *st)
{
    if (st->redis) { /* a staged value is the only copy until the commit */
        struct entry *e = st->tail;
        while (st->count > st->capacity && e) {
            struct entry *prev = e->prev;
            if (!e->dirty)
                lru_remove(st, e->key);
            e = prev;
        }
        return;
    }
    if (!st->env)
        return; /* memory only: the LRU is the only copy */
    while (st->count > st->capacity && st->tail)
        lru_remove(st, st->tail->key);
}

/* Inserts or replaces key's value (copied); the entry becomes the most recent. dirty: a staged
 * Redis write (set before the eviction, which must not take it). */
static struct entry *lru_set(struct state_store *st, const char *key, const void *val, size_t len,
                             int dirty)
{
    struct entry **pp = slot(st, key);
    struct entry *e = *pp;
    void *copy = xmalloc(len ? len : 1);
    if (len)
        memcpy(copy, val, len);
    if (e) {
        free(e->val);
        list_unlink(st, e);
    } else {
        e = xcalloc(1, sizeof(*e));
        e->key = xstrdup(key);
        *pp = e;
        st->count++;
    }
    e->val = copy;
    e->len = len;
    e->dirty = dirty;
    list_push_front(st, e);
    if (st->count > st->nbuckets * 2)
        grow(st);
    evict(st);
    return e;
}

/* ---------------------------------------------------------------- open / close */

static int mkdirs(const char *dir)
{
    char *p = xstrdup(dir);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0700) && errno != EEXIST) {
            rc = -errno;
            break;
        }
        *s = c;
        if (!c)
            break;
    }
    free(p);
    return rc;
}

/* LMDB's lock file is its reader table: 126 readers of 64 bytes plus a header make 8 KiB
 * (LMDB 0.9). A table that ever grew past the reserve would be backed up to its size. */
#define LOCK_RESERVE 8192

/* Gives every page LMDB may map of <dir>/lock.mdb a block, without changing its size (LMDB reads
 * its reader count from the size, and every process of the model must agree on it): the blocks
 * beyond the end are those an ftruncate up to the table's size then covers. A file system that
 * cannot preallocate (EOPNOTSUPP) is left to LMDB as before. */
static int lock_file_backed(const char *dir)
{
    char *path = xasprintf("%s/lock.mdb", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(path);
    if (fd < 0)
        return -errno;
    struct stat sb;
    int rc = fstat(fd, &sb) ? errno : 0;
    off_t len = !rc && sb.st_size > LOCK_RESERVE ? sb.st_size : LOCK_RESERVE;
    if (!rc && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, len))
        rc = errno == EOPNOTSUPP ? 0 : errno;
    close(fd);
    return -rc;
}

int state_open(struct state_store **out, const char *dir, const struct state_opts *o, char *err,
               size_t errlen)
{
    struct state_store *st = xcalloc(1, sizeof(*st));
    st->capacity = o && o->capacity ? o->capacity : STATE_DEFAULT_CAPACITY;
    st->nbuckets = 64;
    while (st->nbuckets < st->capacity && st->nbuckets < (1u << 20))
        st->nbuckets *= 2;
    st->buckets = xcalloc(st->nbuckets, sizeof(*st->buckets));
    *out = NULL;
    if (o && o->redis_url) {
        int rc = state_redis_open(&st->redis, o->redis_url,
                                  o->redis_prefix ? o->redis_prefix : "torchserve-c",
                                  o->redis_ttl_ms, err, errlen);
        if (rc) {
            state_close(st);
            return rc;
        }
        *out = st;
        return 0;
    }
    if (!dir) {
        *out = st;
        return 0;
    }

    int rc = mkdirs(dir);
    const char *what = "mkdir";
    MDB_txn *txn = NULL;
    if (rc)
        goto fail;
    what = "the lock file";
    if ((rc = lock_file_backed(dir)))
        goto fail;
    what = "mdb_env_create";
    if ((rc = mdb_err(mdb_env_create(&st->env))))
        goto fail;
    what = "mdb_env_set_mapsize";
    size_t map = o && o->map_size ? o->map_size : STATE_DEFAULT_MAP_SIZE;
    if ((rc = mdb_err(mdb_env_set_mapsize(st->env, map))))
        goto fail;
    what = "mdb_env_open";
    unsigned flags = MDB_NOTLS | (o && o->sync ? 0 : MDB_NOSYNC);
    if ((rc = mdb_err(mdb_env_open(st->env, dir, flags, 0600))))
        goto fail;
    int fd;
    if (mdb_env_get_fd(st->env, &fd) == 0) {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    int dead = 0;
    mdb_reader_check(st->env, &dead); /* slots of killed predecessors */
    st->max_key = (size_t)mdb_env_get_maxkeysize(st->env);
    what = "mdb_dbi_open";
    if ((rc = mdb_err(mdb_txn_begin(st->env, NULL, 0, &txn))))
        goto fail;
    if ((rc = mdb_err(mdb_dbi_open(txn, NULL, 0, &st->dbi)))) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_err(mdb_txn_commit(txn))))
        goto fail;
    *out = st;
    return 0;
fail:
    snprintf(err, errlen, "state store %s: %s: %s", dir, what, state_strerror(rc));
    state_close(st);
    return rc;
}

void state_close(struct state_store *st)
{
    if (!st)
        return;
    if (st->wtxn)
        mdb_txn_abort(st->wtxn);
    if (st->env)
        mdb_env_close(st->env);
    state_redis_close(st->redis);
    struct entry *e = st->head;
    while (e) {
        struct entry *n = e->next;
        entry_free(e);
        e = n;
    }
    free(st->buckets);
    free(st);
}

/* ---------------------------------------------------------------- get / put / del / commit */

static int key_ok(const struct state_store *st, const char *key)
{
    size_t n = strlen(key);
    if (n == 0)
        return -EINVAL;
    if (st->env && n > st->max_key)
        return -ENAMETOOLONG;
    return 0;
}

int state_get(struct state_store *st, const char *key, const void **val, size_t *len)
{
    int rc = key_ok(st, key);
    if (rc)
        return rc;
    struct entry *e = *slot(st, key);
    if (st->redis && !(e && e->dirty)) {
        /* another instance may have written it since this worker read it */
        char *v;
        size_t n;
        st->stats.misses++;
        if ((rc = state_redis_get(st->redis, key, &v, &n)))
            return rc;
        e = lru_set(st, key, v, n, 0);
        free(v);
        *val = e->val;
        *len = e->len;
        return 0;
    }
    if (e) {
        st->stats.hits++;
        list_unlink(st, e);
        list_push_front(st, e);
        *val = e->val;
        *len = e->len;
        return 0;
    }
    st->stats.misses++;
    if (!st->env)
        return -ENOENT;
    MDB_txn *txn = st->wtxn;
    if (!txn && (rc = mdb_err(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn))))
        return rc;
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key}, v;
    rc = mdb_get(txn, st->dbi, &k, &v);
    if (rc == 0)
        e = lru_set(st, key, v.mv_data, v.mv_size, 0);
    if (txn != st->wtxn)
        mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
        return -ENOENT;
    if (rc)
        return mdb_err(rc);
    /* the entry may have been evicted at once only with capacity 0, which state_open forbids */
    *val = e->val;
    *len = e->len;
    return 0;
}

static int begin_write(struct state_store *st)
{
    if (st->wtxn)
        return 0;
    return mdb_err(mdb_txn_begin(st->env, NULL, 0, &st->wtxn));
}

int state_put(struct state_store *st, const char *key, const void *val, size_t len)
{
    int rc = key_ok(st, key);
    if (rc)
        return rc;
    if (st->env) {
        int64_t t0 = ts_now_us();
        if ((rc = begin_write(st)))
            return rc;
        MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
        MDB_val v = {.mv_size = len, .mv_data = (void *)val};
        rc = mdb_err(mdb_put(st->wtxn, st->dbi, &k, &v, 0));
        st->stats.commit_us += ts_now_us() - t0;
        if (rc)
            return rc; /* the transaction is now unusable: state_commit reports it */
    }
    if (st->redis)
        state_redis_stage_set(st->redis, key, val, len);
    st->stats.writes++;
    lru_set(st, key, val, len, st->redis != NULL);
    return 0;
}

int state_del(struct state_store *st, const char *key)
{
    int rc = key_ok(st, key);
    if (rc)
        return rc;
    lru_remove(st, key);
    if (st->redis) {
        state_redis_stage_del(st->redis, key);
        st->stats.writes++;
        return 0;
    }
    if (!st->env)
        return 0;
    int64_t t0 = ts_now_us();
    if ((rc = begin_write(st)))
        return rc;
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
    rc = mdb_del(st->wtxn, st->dbi, &k, NULL);
    st->stats.commit_us += ts_now_us() - t0;
    st->stats.writes++;
    return rc == MDB_NOTFOUND ? 0 : mdb_err(rc);
}

int state_commit(struct state_store *st)
{
    if (st && st->redis) {
        if (!state_redis_pending(st->redis))
            return 0;
        int64_t t0 = ts_now_us();
        int rc = state_redis_commit(st->redis);
        st->stats.commit_us += ts_now_us() - t0;
        if (rc == 0)
            st->stats.commits++;
        for (struct entry *e = st->head; e; e = e->next)
            e->dirty = 0; /* committed, or lost: the caller forgets the cache then */
        evict(st);
        return rc;
    }
    if (!st || !st->wtxn)
        return 0;
    int64_t t0 = ts_now_us();
    int rc = mdb_err(mdb_txn_commit(st->wtxn)); /* frees the transaction even on failure */
    st->wtxn = NULL;
    st->stats.commit_us += ts_now_us() - t0;
    if (rc == 0)
        st->stats.commits++;
    return rc;
}

void state_forget_cache(struct state_store *st)
{
    while (st && st->tail)
        lru_remove(st, st->tail->key);
}

int state_dirty(const struct state_store *st)
{
    return st && (st->wtxn || state_redis_pending(st->redis));
}

const char *state_last_error(const struct state_store *st)
{
    return st ? state_redis_error(st->redis) : "";
}

void state_get_stats(const struct state_store *st, struct state_stats *out)
{
    *out = st->stats;
}

size_t state_lru_size(const struct state_store *st)
{
    return st->count;
}
