/*
 * state: the worker's per-sequence state store, an in-memory LRU with write-through to LMDB, or,
 * when the instances share their sequences' state, to Redis (state_redis.h): then the LRU only
 * holds what this step wrote (another instance may have written a value since it was read), and
 * every get of an unwritten value asks Redis.
 *
 * Owns: the LRU (keys = sequence ids, values = opaque bytes), the LMDB environment of one model
 * (<state dir>/data.mdb + lock.mdb) and its one staged write transaction. Several workers of the
 * same model open the same directory: LMDB serialises their write transactions with a robust
 * inter-process mutex, so a killed worker does not wedge the others. An environment is opened by
 * the process that uses it (after exec) and never shared across fork().
 *
 * Writes are staged: state_put / state_del update the LRU at once and go into a write
 * transaction that stays open until state_commit (the worker commits before it writes any
 * response frame, so every acknowledged state is on disk, and a step's writes share one commit).
 * Reads hit the LRU, else LMDB (a respawned worker resumes its sequences from there).
 *
 * Threading: the worker's single thread. Errors: 0 or a negative errno, or an LMDB code
 * (MDB_ codes, also negative); state_strerror() names either.
 */
#ifndef TS_STATE_H
#define TS_STATE_H

#include <stddef.h>
#include <stdint.h>

#define STATE_DEFAULT_CAPACITY 1024
#define STATE_DEFAULT_MAP_SIZE (256u << 20)

struct state_store;

struct state_opts {
    size_t capacity; /* LRU entries; 0 = STATE_DEFAULT_CAPACITY */
    size_t map_size; /* LMDB map size in bytes; 0 = STATE_DEFAULT_MAP_SIZE */
    int sync;        /* 1: fdatasync every commit; 0: MDB_NOSYNC (survives a worker crash,
                        not a machine crash) */
    /* shared state: redis://[:PASSWORD@]HOST:PORT[/DB] instead of LMDB (dir is then unused),
     * keys "<redis_prefix>:<sequence id>", each expiring redis_ttl_ms after its last write (0:
     * never) */
    const char *redis_url;
    const char *redis_prefix;
    long redis_ttl_ms;
};

struct state_stats {
    uint64_t hits, misses; /* LRU lookups */
    uint64_t commits;      /* write transactions committed */
    uint64_t writes;       /* puts + deletes staged */
    int64_t commit_us;     /* total time spent in put/del/commit (LMDB write-through cost) */
};

/* Opens (creating) the store in dir (created if missing, mode 0700). dir NULL: memory only, and
 * then nothing is ever evicted (there is nowhere to reload it from). err names the failure. */
int state_open(struct state_store **out, const char *dir, const struct state_opts *o, char *err,
               size_t errlen);
/* Aborts a staged transaction (uncommitted writes are lost) and frees everything. NULL is ok. */
void state_close(struct state_store *st);
/* Empties the LRU (after a failed commit it may hold values that never reached the disk). */
void state_forget_cache(struct state_store *st);

/* The value for key: 0 with *val and *len (valid until the next state_* call), -ENOENT, or an
 * error. A hit moves the entry to the front of the LRU; a miss loads it from LMDB. */
int state_get(struct state_store *st, const char *key, const void **val, size_t *len);
/* Stages key = val (copied). -ENAMETOOLONG for a key LMDB cannot hold. */
int state_put(struct state_store *st, const char *key, const void *val, size_t len);
/* Stages the removal of key (absent is not an error). */
int state_del(struct state_store *st, const char *key);
/* Commits the staged writes (no-op without any). After a failure the staged writes are lost
 * and the LRU may be ahead of disk: the caller must not acknowledge them (the worker exits). */
int state_commit(struct state_store *st);
/* 1 while writes are staged. */
int state_dirty(const struct state_store *st);

void state_get_stats(const struct state_store *st, struct state_stats *out);
/* Entries currently in the LRU. */
size_t state_lru_size(const struct state_store *st);
const char *state_strerror(int err);
/* What the Redis backend last reported (its error text or the connection's), "" otherwise. */
const char *state_last_error(const struct state_store *st);

#endif
