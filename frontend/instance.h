/*
 * instance: what tells one running torchserve-c from another on the same machine.
 *
 * An instance is identified by its inference address (host and port): two servers can never
 * share it. Its pidfile is ${TMPDIR:-/tmp}/torchserve-c-<uid>/<host>_<port>.pid (a directory
 * only that user can write) and holds the pid, the
 * process's start time (so a recycled pid is never mistaken for it) and the instance's working
 * directory (where its key_file.json is). `--stop` signals a pid only after checking that it is
 * a live torchserve-c with that start time. Each instance's scratch directory
 * (${TMPDIR:-/tmp}/torchserve-c.XXXXXX) records its owner the same way, so that the directories
 * of killed instances are removed at the next start.
 *
 * Main thread, before the loop starts or after it ends; the launcher (--stop) too.
 */
#ifndef TS_INSTANCE_H
#define TS_INSTANCE_H

#include <sys/types.h>

struct config;

/* Creates the pidfile of the instance that serves cfg's inference address; refuses (with a
 * message on stderr) if a live torchserve-c owns it. */
int instance_acquire(const struct config *cfg);
void instance_release(void);

/* Creates this instance's scratch directory (*out, malloc'd), after removing those of dead
 * instances. */
int instance_make_run_dir(char **out);

struct instance_info {
    pid_t pid;
    char cwd[4096];
    char pidfile[4096];
};

/* The live instances: those of cfg when it is not NULL (0 or 1), else every one found under
 * TMPDIR. Returns how many were written into out (at most max). */
int instance_find(const struct config *cfg, struct instance_info *out, int max);

#endif
