/*
 * worker_log: a worker process's stdout and stderr, read from a pipe on the loop and written
 * line by line to model_log.log, tagged with the worker as TorchServe names it
 * (W-<id>-<model>_<version>), and to the frontend's own stderr as before (the terminal with
 * --foreground, ts_log.log in the background).
 *
 * A line that starts with "[METRICS]" (TorchServe's backend metric line, metric_line.h) is not
 * a log line: it goes to the metric callback instead, as TorchServe's frontend takes them out of
 * the worker's output.
 *
 * Loop thread only. The worker owns its worker_log; freeing it reads what the pipe still holds
 * first, so a dying worker's last lines are kept.
 */
#ifndef TS_WORKER_LOG_H
#define TS_WORKER_LOG_H

#include <stddef.h>

struct worker_log;

/* A pipe for a worker's output: returns the read end (close-on-exec, non-blocking) and puts the
 * write end, which the child dup2s onto its fds 1 and 2, in *wr. -errno on failure. */
int worker_log_pipe(int *wr);
/* A "[METRICS]" line of the worker's output: the text after the prefix, without the newline. */
typedef void worker_log_metric_fn(void *arg, const char *line, size_t len);
/* Starts reading rd (takes it) for worker id of model name/version; metric lines go to
 * on_metric(arg, ...) (NULL: they are logged like the others). */
struct worker_log *worker_log_new(int rd, int id, const char *name, const char *version,
                                  worker_log_metric_fn *on_metric, void *arg);
void worker_log_free(struct worker_log *l);

#endif
