/*
 * rlog: see rlog.h. Two buffers: callers append to `pending` under the mutex; the writer swaps it
 * for its own empty one and writes outside the lock, so a caller waits at most for a memcpy of
 * another caller's line, never for the disk.
 */
#include "rlog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

struct rlog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    struct buf pending;
    unsigned long dropped;
    int kicked; /* pending passed RLOG_KICK_BYTES: the writer was signalled */
    int stop;
    char *path;
    long max_size;
    int max_files;
    int fd;     /* our file, or -1 when adopting stdio */
    int adopt;  /* rotate the file behind fds 1 and 2 */
    off_t size; /* of the current file, as far as we know */
};

int rlog_parse_size(const char *s, long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v <= 0)
        return -EINVAL;
    long long mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1LL << 10, end++;
        break;
    case 'm':
    case 'M':
        mul = 1LL << 20, end++;
        break;
    case 'g':
    case 'G':
        mul = 1LL << 30, end++;
        break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v > (1LL << 62) / mul)
        return -EINVAL;
    *out = (long)(v * mul);
    return 0;
}

static void make_parent(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    free(p);
}

static int open_file(const char *path)
{
    make_parent(path);
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

/* path.(max-1) -> path.max, ..., path -> path.1 (the oldest is replaced), then a new path. */
static void rotate(struct rlog *r)
{
    size_t n = strlen(r->path) + 16;
    char *from = xmalloc(n), *to = xmalloc(n);
    for (int i = r->max_files - 1; i >= 1; i--) {
        snprintf(from, n, "%s.%d", r->path, i);
        snprintf(to, n, "%s.%d", r->path, i + 1);
        rename(from, to);
    }
    snprintf(to, n, "%s.1", r->path);
    rename(r->path, to);
    free(from);
    free(to);
    int fd = open_file(r->path);
    if (fd < 0)
        return; /* keep writing to the renamed file: better than losing lines */
    if (r->adopt) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    } else {
        close(r->fd);
        r->fd = fd;
    }
    r->size = 0;
}

static void write_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        p += k;
        len -= (size_t)k;
    }
}

/* Writes whole lines, rotating between them so that a file passes max_size only when one line
 * alone is longer. */
static void write_rotating(struct rlog *r, const uint8_t *p, size_t len)
{
    while (len) {
        size_t room = r->size < r->max_size ? (size_t)(r->max_size - r->size) : 0;
        size_t take = len;
        if (len > room) {
            const uint8_t *nl = room ? memrchr(p, '\n', room) : NULL;
            if (nl) {
                take = (size_t)(nl - p) + 1;
            } else if (r->size > 0) {
                rotate(r);
                continue;
            } else {
                nl = memchr(p, '\n', len);
                take = nl ? (size_t)(nl - p) + 1 : len;
            }
        }
        write_all(r->fd, p, take);
        r->size += (off_t)take;
        p += take;
        len -= take;
        if (r->size >= r->max_size)
            rotate(r);
    }
}

static void *writer(void *arg)
{
    struct rlog *r = arg;
    struct buf out;
    buf_init(&out);
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (!r->stop && !r->kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += RLOG_FLUSH_MS * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        struct buf t = out;
        out = r->pending;
        r->pending = t;
        unsigned long dropped = r->dropped;
        r->dropped = 0;
        r->kicked = 0;
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);

        if (r->adopt) {
            struct stat st;
            if (fstat(2, &st) == 0 && st.st_size >= r->max_size)
                rotate(r);
        } else {
            if (dropped) {
                char note[96];
                int k = snprintf(note, sizeof(note), "(%lu log lines dropped: the disk was slow)\n",
                                 dropped);
                buf_put(&out, note, (size_t)k);
            }
            write_rotating(r, out.data, out.len);
        }
        buf_reset(&out);
        pthread_mutex_lock(&r->mu);
        if (stop && !r->pending.len)
            break;
    }
    pthread_mutex_unlock(&r->mu);
    buf_free(&out);
    return NULL;
}

static struct rlog *start(const char *path, long max_size, int max_files, int adopt, char *why,
                          size_t n)
{
    struct rlog *r = xcalloc(1, sizeof(*r));
    r->path = xstrdup(path);
    r->max_size = max_size > 0 ? max_size : 1;
    r->max_files = max_files >= 1 ? max_files : 1;
    r->adopt = adopt;
    r->fd = -1;
    buf_init(&r->pending);
    if (!adopt) {
        r->fd = open_file(path);
        struct stat st;
        if (r->fd < 0 || fstat(r->fd, &st) != 0) {
            snprintf(why, n, "cannot open %s: %s", path, strerror(errno));
            if (r->fd >= 0)
                close(r->fd);
            free(r->path);
            free(r);
            return NULL;
        }
        r->size = st.st_size;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&r->thread, NULL, writer, r);
    if (rc) {
        snprintf(why, n, "cannot start the writer of %s: %s", path, strerror(rc));
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        if (r->fd >= 0)
            close(r->fd);
        free(r->path);
        free(r);
        return NULL;
    }
    return r;
}

struct rlog *rlog_open(const char *path, long max_size, int max_files, char *why, size_t n)
{
    return start(path, max_size, max_files, 0, why, n);
}

struct rlog *rlog_adopt_stdio(const char *path, long max_size, int max_files, char *why, size_t n)
{
    return start(path, max_size, max_files, 1, why, n);
}

void rlog_write(struct rlog *r, const char *line, size_t len)
{
    pthread_mutex_lock(&r->mu);
    if (r->pending.len + len > RLOG_MAX_PENDING) {
        r->dropped++;
    } else {
        buf_put(&r->pending, line, len);
        if (r->pending.len >= RLOG_KICK_BYTES && !r->kicked) {
            r->kicked = 1;
            pthread_cond_signal(&r->cv);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

void rlog_close(struct rlog *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    if (r->fd >= 0)
        close(r->fd);
    buf_free(&r->pending);
    free(r->path);
    free(r);
}
