/*
 * worker_log: see worker_log.h. Lines are cut at WORKER_LOG_LINE_MAX: a worker that prints
 * without newlines cannot grow the frontend's memory.
 */
#include "worker_log.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "metric_line.h"
#include "rlog.h"
#include "util.h"

#define WORKER_LOG_LINE_MAX 16384

struct worker_log {
    int fd;
    struct event *ev;
    char tag[TS_NAME_MAX * 2 + 32]; /* "W-9000-mlp_1.0 " */
    size_t tag_len;
    struct buf line;
    worker_log_metric_fn *on_metric;
    void *arg;
};

int worker_log_pipe(int *wr)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    *wr = p[1];
    return p[0];
}

/* One line (without its newline) to model_log.log and stderr, tagged with its worker, with
 * control characters escaped (log_escape): a handler's print cannot forge or hide a line. */
static void emit(struct worker_log *l, const char *s, size_t n)
{
    size_t pl = sizeof(METRIC_LINE_PREFIX) - 1;
    if (l->on_metric && n >= pl && !memcmp(s, METRIC_LINE_PREFIX, pl)) {
        l->on_metric(l->arg, s + pl, n - pl);
        return;
    }
    static char out[WORKER_LOG_LINE_MAX * 4 + sizeof(l->tag) + 2]; /* loop thread only */
    memcpy(out, l->tag, l->tag_len);
    size_t m = l->tag_len + log_escape(out + l->tag_len, sizeof(out) - l->tag_len - 1, s, n);
    out[m++] = '\n';
    if (srv->model_log)
        rlog_write(srv->model_log, out, m);
    fwrite(out, 1, m, stderr);
}

/* Emits the complete lines of l->line (all of it when flush), keeping a partial last one. */
static void split(struct worker_log *l, int flush)
{
    const char *p = (const char *)l->line.data, *end = p + l->line.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl && !flush && end - p < WORKER_LOG_LINE_MAX)
            break;
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n > WORKER_LOG_LINE_MAX)
            n = WORKER_LOG_LINE_MAX;
        emit(l, p, n);
        p += n + (nl && p + n == nl);
    }
    size_t left = (size_t)(end - p);
    memmove(l->line.data, p, left);
    l->line.len = left;
    fflush(stderr);
}

/* Reads what the pipe holds; 1 at EOF or error. */
static int drain(struct worker_log *l)
{
    for (;;) {
        buf_reserve(&l->line, 4096);
        ssize_t n = read(l->fd, l->line.data + l->line.len, l->line.cap - l->line.len - 1);
        if (n > 0) {
            l->line.len += (size_t)n;
            split(l, 0);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        return !(n < 0 && errno == EAGAIN);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker_log *l = arg;
    if (drain(l)) {
        split(l, 1);
        event_del(l->ev);
    }
}

struct worker_log *worker_log_new(int rd, int id, const char *name, const char *version,
                                  worker_log_metric_fn *on_metric, void *arg)
{
    struct worker_log *l = xcalloc(1, sizeof(*l));
    l->fd = rd;
    l->on_metric = on_metric;
    l->arg = arg;
    int n = snprintf(l->tag, sizeof(l->tag), "W-%d-%s_%s ", id, name, version);
    l->tag_len = n > 0 && (size_t)n < sizeof(l->tag) ? (size_t)n : 0;
    buf_init(&l->line);
    l->ev = event_new(srv->base, rd, EV_READ | EV_PERSIST, on_read, l);
    event_add(l->ev, NULL);
    return l;
}

void worker_log_free(struct worker_log *l)
{
    if (!l)
        return;
    drain(l);
    split(l, 1);
    event_free(l->ev);
    close(l->fd);
    buf_free(&l->line);
    free(l);
}
