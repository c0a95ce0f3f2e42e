/*
 * worker_pool: the worker processes of every model. Spawns them with posix_spawn (their end of
 * a socketpair on fd 3), sends the load frame, writes batches, reads response frames, notices
 * death at once (socket EOF + SIGCHLD), fails in-flight jobs ("Worker died", 507 when the kernel
 * OOM-killed it), respawns with bounded exponential back-off (never after exit code 2), and kills
 * a worker that does not answer within responseTimeout.
 *
 * Loop thread only. A worker group (one per model, embedded in struct model) owns its workers; a
 * worker holds references to its running jobs. The pool knows nothing of models, queues or
 * sequences: what happens upward (a worker loaded, left, freed a slot, changed state) is told
 * through the group's ops, which the dispatcher (model.c) sets.
 */
#ifndef TS_WORKER_POOL_H
#define TS_WORKER_POOL_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "gpu_assign.h"
#include "job.h"
#include "metrics.h"
#include "proc_info.h"
#include "util.h"
#include "worker_out.h"
#include "worker_progress.h"

struct bufferevent;
struct event;
struct worker;
struct worker_group;
TAILQ_HEAD(worker_list, worker);

/* What the pool tells the group's owner. Each is called on the loop thread, never from inside a
 * worker_pool_* call made by the owner except where noted. */
struct worker_group_ops {
    /* w loaded the model and takes jobs. */
    void (*ready)(struct worker_group *g, struct worker *w);
    /* w leaves the group for good (stopped, or the group is going away). */
    void (*gone)(struct worker_group *g, struct worker *w);
    /* A worker may take more jobs (a step answered, a job cancelled): dispatch. */
    void (*slots)(struct worker_group *g);
    /* A worker died holding jobs it had not started (see give_back in worker_pool.c): they are
     * the owner's again, to queue at the head in the order given (the order they were sent).
     * Called from inside the death's handling, before `changed`; never a sequence's job. */
    void (*requeue)(struct worker_group *g, struct job **jobs, int n);
    /* A worker died, failed for good, or is respawning; alive = worker_pool_alive(g). */
    void (*changed)(struct worker_group *g, const char *why);
    /* A prediction carried the worker's metrics: records (OTF_METRICS_KEY; len 0 for none)
     * and step times (OTF_STEP_KEY; NULL for none), taken out of the prediction before any sink
     * sees it. j: its job, before the frame is delivered; NULL when the job is gone. */
    void (*metrics)(struct worker_group *g, struct job *j, struct otf_str records,
                    const struct otf_step *step);
    /* A "[METRICS]" line of a worker's output (worker_log.h): the text after the prefix. */
    void (*metric_line)(struct worker_group *g, const char *line, size_t len);
};

/* One model's workers and what they load. The strings are the owner's, immutable while the group
 * has workers. */
struct worker_group {
    const char *name, *version, *dir, *handler, *envelope;
    const char *venv; /* the model's virtual environment (install_py_dep_per_model), or NULL */
    int batch_size;
    int startup_timeout_s, response_timeout_s;
    int continuous; /* the handler keeps requests across steps (learned at load) */
    struct worker_list workers;
    int n_workers;
    uint64_t n_batches; /* batches sent */
    uint64_t max_batch_seen;
    struct hist batch_sizes; /* requests per batch sent */
    int64_t step_us;         /* a step's handle() time in µs, moving average; 0 until reported */
    char load_error[512];    /* what the last failed load reported; "" after a good load */
    struct gpu_plan gpu;     /* the owner's: which GPUs its workers rotate over (none: CPU) */
    const struct worker_group_ops *ops;
};

enum worker_state {
    WORKER_STARTING, /* spawned, load frame sent */
    WORKER_READY,    /* model loaded */
    WORKER_BACKOFF,  /* died, waiting to respawn */
    WORKER_STOPPING, /* scaled down, waiting for exit */
    WORKER_FAILED,   /* exit code 2: will not be respawned */
};

struct worker {
    int id;     /* 9000, 9001, ... as TorchServe's port numbers */
    int gpu_id; /* its GPU for life, respawns included (gpu_assign.h); -1: the CPU */
    pid_t pid;
    enum worker_state state;
    struct worker_group *group;      /* NULL once detached (its model is going away) */
    struct worker_conn conn;         /* its socket (worker_out.c) */
    struct worker_progress progress; /* what it finished and ran (otf_progress) */
    uint64_t sent; /* requests sent to this process: the next one's number (job.wseq) */
    struct job_list inflight;
    int n_inflight;
    int n_paused;           /* of the in-flight jobs */
    struct event *timer;    /* startup / response timeout, back-off */
    int64_t start_wall_ms;  /* for describe */
    int64_t load_ms;        /* spawn to load reply (WorkerLoadTime), 0 until loaded */
    struct worker_log *log; /* its stdout/stderr (model_log.log), NULL with a fake exec */
    int64_t last_io_us;
    int retries; /* consecutive failures, for back-off */
    unsigned long oom_kills_at_spawn;
    struct buf out; /* scratch for encoding */
    uint64_t steps; /* response frames this process sent (> 0: it answered, so a death starts
                       the back-off again) */
    int64_t ready_since_us;
    const char *kill_reason;   /* why we killed it, for the in-flight jobs' error */
    TAILQ_ENTRY(worker) link;  /* group->workers */
    TAILQ_ENTRY(worker) glink; /* every live process, for reaping */
};

/* Sets up SIGCHLD handling on the loop. */
int worker_pool_init(void);
void worker_group_init(struct worker_group *g, const struct worker_group_ops *ops);
/* Starts a worker process whose fd 3 is `fd` (the pool keeps the other end); 0 and *pid, or an
 * errno. The default spawns torchserve-c-worker; tests install a fake worker. NULL restores it. */
typedef int worker_exec_fn(const struct worker *w, int fd, pid_t *pid, void *arg);
void worker_pool_set_exec(worker_exec_fn *fn, void *arg);
/* Brings the group's worker count to n (spawning or stopping workers). n = 0 also detaches the
 * stopping ones: the group may be freed once this returns. */
int worker_pool_scale(struct worker_group *g, int n);
/* The worker may be given jobs: loaded, and its connection still open (between the EOF of a
 * dying worker and its reaping it is still WORKER_READY, with its in-flight jobs). */
int worker_takes_jobs(const struct worker *w);
/* Sends a batch of jobs to a worker that takes jobs (moves them to its in-flight list). */
void worker_send_batch(struct worker *w, struct job **jobs, int n);
/* Tells the worker that a sequence ended (OTF 'S' frame, OTF_SEQ_* event). */
void worker_send_seq_event(struct worker *w, const char *seq_id, int event);
/* A running job's client stopped reading (paused = 1) or caught up: tell the worker, which
 * holds it out of its steps meanwhile. A worker whose running jobs are all paused is not
 * expected to answer, so responseTimeout does not run then. */
void worker_pause_job(struct worker *w, struct job *j, int paused);
/* A running job's streamed input: sends the messages it holds ('D' frames) and, once its
 * client sent its last, the end ('E'). */
void worker_send_input(struct worker *w, struct job *j);
/* A running job's client went away: tell the worker, free the slot. */
void worker_cancel_job(struct worker *w, struct job *j);
/* Number of workers in the group that are alive (starting, ready or respawning). */
int worker_pool_alive(const struct worker_group *g);
/* Workers that have loaded the model (WORKER_READY): the ones that can answer now. */
int worker_pool_ready(const struct worker_group *g);
/* Stops every worker of every model; returns when all have exited (or were killed). */
void worker_pool_shutdown(void);
const char *worker_state_name(const struct worker *w);

#endif
