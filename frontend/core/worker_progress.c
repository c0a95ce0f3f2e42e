/*
 * worker_progress: see worker_progress.h.
 */
#include "worker_progress.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

/* the page's fd is kept at or above this: posix_spawn's dup2 onto fds 1-4 must not clobber it */
#define PROGRESS_FD_MIN 16

static int progress_open(struct worker_progress *wp)
{
    int fd = memfd_create(OTF_PROGRESS_NAME, MFD_CLOEXEC);
    if (fd >= 0 && fd < PROGRESS_FD_MIN) {
        int high = fcntl(fd, F_DUPFD_CLOEXEC, PROGRESS_FD_MIN);
        close(fd);
        fd = high;
    }
    void *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof(struct otf_progress)) == 0)
        m = mmap(NULL, sizeof(struct otf_progress), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        LOG_WARN("worker progress page: %s (a worker's death then fails the batches it holds)",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        wp->fd = -1;
        return -1;
    }
    wp->fd = fd;
    wp->map = m;
    return 0;
}

int worker_progress_renew(struct worker_progress *wp)
{
    if (!wp->map && progress_open(wp))
        return -1;
    memset(wp->map, 0, sizeof(*wp->map));
    return 0;
}

int worker_progress_read(const struct worker_progress *wp, uint64_t *started, uint64_t *finished)
{
    if (!wp->map || __atomic_load_n(&wp->map->magic, __ATOMIC_ACQUIRE) != OTF_PROGRESS_MAGIC)
        return 0;
    *started = __atomic_load_n(&wp->map->started, __ATOMIC_RELAXED);
    *finished = __atomic_load_n(&wp->map->finished, __ATOMIC_RELAXED);
    return 1;
}

void worker_progress_close(struct worker_progress *wp)
{
    if (wp->map)
        munmap(wp->map, sizeof(*wp->map));
    if (wp->fd >= 0)
        close(wp->fd);
    wp->map = NULL;
    wp->fd = -1;
}
