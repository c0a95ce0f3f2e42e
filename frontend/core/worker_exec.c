/*
 * worker_exec: see worker_exec.h. What the process gets: the config's numbers as arguments
 * (--threads, --max-request-size, --state-dir, --log-level, --busy-poll-us,
 * --stream-buffer-size), the frontend's environment without the variables that are ours to set,
 * then those (OMP_NUM_THREADS, TS_WORKER_ID, WORKER_ENV_METRICS, WORKER_ENV_VENV).
 */
#include "worker_exec.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "worker_log.h"

extern char **environ;

/* The read end of the output pipe of the worker just spawned, until worker_exec_take_log (the
 * exec hook's signature is the unit tests' too: fakes have none). */
static int spawn_log_rd = -1;

int worker_exec_take_log(void)
{
    int fd = spawn_log_rd;
    spawn_log_rd = -1;
    return fd;
}

int worker_exec_binary(const struct worker *w, int fd, pid_t *pid, void *arg)
{
    (void)arg;
    char threads[16], maxreq[32], busy[16], sbuf[32];
    snprintf(threads, sizeof(threads), "%d", srv->cfg.worker_threads);
    snprintf(busy, sizeof(busy), "%d", srv->cfg.busy_poll_us);
    snprintf(maxreq, sizeof(maxreq), "%ld", srv->cfg.max_request_size);
    snprintf(sbuf, sizeof(sbuf), "%ld", srv->cfg.stream_buffer_size);
    /* '@' is in neither names nor versions: "a-b"/"c" and "a"/"b-c" cannot share a store */
    char *state = xasprintf("%s/%s@%s", srv->cfg.state_dir, w->group->name, w->group->version);
    char *argv[] = {srv->worker_bin,
                    "--threads",
                    threads,
                    "--max-request-size",
                    maxreq,
                    "--state-dir",
                    state,
                    "--log-level",
                    (char *)(log_min_level == LOG_LEVEL_DEBUG ? "debug" : "info"),
                    "--busy-poll-us",
                    busy,
                    "--stream-buffer-size",
                    sbuf,
                    srv->cfg.state_store ? "--state-redis" : NULL,
                    srv->cfg.state_store,
                    NULL};
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **envp = xcalloc(ne + 6, sizeof(char *));
    size_t k = 0;
    /* what we set is ours alone: an inherited value of these never reaches a worker */
    static const char *const ours[] = {"OMP_NUM_THREADS=", "TS_WORKER_ID=", WORKER_ENV_METRICS "=",
                                       WORKER_ENV_VENV "=", WORKER_ENV_PYTHON "="};
    for (size_t i = 0; i < ne; i++) {
        size_t o = 0;
        while (o < sizeof(ours) / sizeof(ours[0]) && strncmp(environ[i], ours[o], strlen(ours[o])))
            o++;
        if (o == sizeof(ours) / sizeof(ours[0]))
            envp[k++] = environ[i];
    }
    char *omp = xasprintf("OMP_NUM_THREADS=%d", srv->cfg.worker_threads);
    char *wid = xasprintf("TS_WORKER_ID=%d", w->id);
    char *venv = w->group->venv ? xasprintf(WORKER_ENV_VENV "=%s", w->group->venv) : NULL;
    envp[k++] = omp;
    envp[k++] = wid;
    if (srv->worker_metrics_env)
        envp[k++] = srv->worker_metrics_env;
    if (venv)
        envp[k++] = venv;
    /* the Python workers run (config.properties' python checked at start-up, pyinfo.h, else
     * the plugin's): its program name (backend/python/py_handler.c) when the model has no venv
     * of its own */
    char *py = srv->python_exe ? xasprintf(WORKER_ENV_PYTHON "=%s", srv->python_exe) : NULL;
    if (py)
        envp[k++] = py;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 3);
    int log_wr = -1;
    spawn_log_rd = worker_log_pipe(&log_wr);
    if (spawn_log_rd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, log_wr, 1);
        posix_spawn_file_actions_adddup2(&fa, log_wr, 2);
    }
    if (w->progress.fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, w->progress.fd, OTF_PROGRESS_FD);
    int rc = posix_spawn(pid, srv->worker_bin, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (log_wr >= 0)
        close(log_wr);
    if (rc != 0 && spawn_log_rd >= 0) {
        close(spawn_log_rd);
        spawn_log_rd = -1;
    }
    free(omp);
    free(wid);
    free(venv);
    free(py);
    free(envp);
    free(state);
    if (rc != 0)
        LOG_ERROR("cannot spawn %s: %s", srv->worker_bin, strerror(rc));
    return rc;
}
