/*
 * worker_progress: the frontend's side of a worker's progress page (otf.h, struct otf_progress).
 *
 * One memfd per worker slot, made at its first spawn and reused by its respawns: each spawn
 * zeroes it and passes it as the new process's fd OTF_PROGRESS_FD. After a death the pool reads
 * which requests the process had finished and which it was running (worker_pool.c, give_back).
 */
#ifndef TS_WORKER_PROGRESS_H
#define TS_WORKER_PROGRESS_H

#include <stdint.h>

#include "otf.h"

struct worker_progress {
    int fd;                   /* -1: none (could not be made: the pool falls back, see give_back) */
    struct otf_progress *map; /* NULL with fd -1 */
};

/* Makes the page unless it exists, and zeroes it for a new process; 0, or -1 (logged): the
 * worker then runs without. */
int worker_progress_renew(struct worker_progress *wp);
/* 1 with the dead process's counts when it kept them (its magic is set), else 0. */
int worker_progress_read(const struct worker_progress *wp, uint64_t *started, uint64_t *finished);
void worker_progress_close(struct worker_progress *wp);

#endif
