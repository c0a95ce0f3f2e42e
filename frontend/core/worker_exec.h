/*
 * worker_exec: how the pool starts a worker process (worker_pool.h's worker_exec_fn, which the
 * unit tests replace with fake workers): posix_spawn of torchserve-c-worker with the command line
 * and environment the server's config gives it, its socket on fd 3, its progress page on
 * OTF_PROGRESS_FD, and its stdout and stderr on a pipe that worker_log reads.
 *
 * Loop thread only. The pipe's read end waits here from the spawn until the pool takes it.
 */
#ifndef TS_WORKER_EXEC_H
#define TS_WORKER_EXEC_H

#include <sys/types.h>

#include "worker_pool.h"

/* The environment a worker gets from the frontend besides its own: metrics.yaml's model metrics
 * as JSON (metrics_config.h), the model's virtual environment, and config.properties' python
 * once checked (pyinfo.h); read by the Python plugin and our ts package. */
#define WORKER_ENV_METRICS "TS_WORKER_MODEL_METRICS"
#define WORKER_ENV_VENV "TS_WORKER_VENV"
#define WORKER_ENV_PYTHON "TS_PYTHON_EXECUTABLE"

/* The default worker_exec_fn: starts torchserve-c-worker for w with fd on its fd 3. 0 and *pid,
 * or the errno of posix_spawn (logged). */
int worker_exec_binary(const struct worker *w, int fd, pid_t *pid, void *arg);
/* The read end of the output pipe of the process worker_exec_binary started last (the caller
 * owns it), once; -1 when there is none (it could not be made, or a fake exec ran). */
int worker_exec_take_log(void);

#endif
