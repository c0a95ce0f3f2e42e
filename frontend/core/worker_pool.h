/*
 * worker_pool: the worker processes of every model. Spawns them with posix_spawn (their end of
 * a socketpair on fd 3), sends the load frame, writes batches, reads response frames, notices
 * death at once (socket EOF + SIGCHLD), fails in-flight jobs ("Worker died", 507 when the kernel
 * OOM-killed it), respawns with bounded exponential back-off (never after exit code 2), and kills
 * a worker that does not answer within responseTimeout.
 *
 * Loop thread only. A model owns its workers; a worker holds references to its running jobs.
 */
#ifndef TS_WORKER_POOL_H
#define TS_WORKER_POOL_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "job.h"
#include "util.h"

struct model;
struct bufferevent;
struct event;

enum worker_state {
    WORKER_STARTING, /* spawned, load frame sent */
    WORKER_READY,    /* model loaded */
    WORKER_BACKOFF,  /* died, waiting to respawn */
    WORKER_STOPPING, /* scaled down, waiting for exit */
    WORKER_FAILED,   /* exit code 2: will not be respawned */
};

struct worker {
    int id; /* 9000, 9001, ... as TorchServe's port numbers */
    pid_t pid;
    enum worker_state state;
    struct model *model;
    struct bufferevent *bev;
    struct job_list inflight;
    int n_inflight;
    struct event *timer;   /* startup / response timeout, back-off */
    int64_t start_wall_ms; /* for describe */
    int64_t last_io_us;
    int retries; /* consecutive failures, for back-off */
    unsigned long oom_kills_at_spawn;
    struct buf out; /* scratch for encoding */
    uint64_t steps; /* response frames received */
    int64_t ready_since_us;
    const char *kill_reason;   /* why we killed it, for the in-flight jobs' error */
    TAILQ_ENTRY(worker) link;  /* model->workers */
    TAILQ_ENTRY(worker) glink; /* every live process, for reaping */
};

/* Sets up SIGCHLD handling on the loop. */
int worker_pool_init(void);
/* Brings the model's worker count to n (spawning or stopping workers). */
int worker_pool_scale(struct model *m, int n);
/* The worker may be given jobs: loaded, and its connection still open (between the EOF of a
 * dying worker and its reaping it is still WORKER_READY, with its in-flight jobs). */
int worker_takes_jobs(const struct worker *w);
/* Sends a batch of jobs to a worker that takes jobs (moves them to its in-flight list). */
void worker_send_batch(struct worker *w, struct job **jobs, int n);
/* Tells the worker that a sequence ended (OTF 'S' frame, OTF_SEQ_* event). */
void worker_send_seq_event(struct worker *w, const char *seq_id, int event);
/* A running job's client went away: tell the worker, free the slot. */
void worker_cancel_job(struct worker *w, struct job *j);
/* Number of workers in the model that are alive (starting or ready). */
int worker_pool_alive(const struct model *m);
/* Stops every worker of every model; returns when all have exited (or were killed). */
void worker_pool_shutdown(void);
/* Resident set size of a pid in kilobytes, 0 if unknown. */
long worker_rss_kb(pid_t pid);
const char *worker_state_name(const struct worker *w);

#endif
