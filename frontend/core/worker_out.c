/*
 * worker_out: see worker_out.h.
 */
#include "worker_out.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "core.h"
#include "util.h"

static struct event *flush_ev;
/* connections with batches waiting, in the order they got their first (a closed one: NULL) */
static struct worker_conn **waiting;
static size_t n_waiting, cap_waiting;

/* Writes at once when nothing is queued: bufferevent_write would wait for the next loop turn and
 * cost two epoll_ctl calls (write interest on, then off) per write, and the worker would start
 * that much later. What the socket does not take now is queued as before. -1 when the worker is
 * gone (its end is closed): none of data reached it, and nothing is queued (the pool learns of
 * the death from the socket's EOF and SIGCHLD); any other error is left to the bufferevent, which
 * meets it on its own write and reports it to the pool's on_event. */
static int write_raw(struct worker_conn *c, const void *data, size_t len)
{
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        ssize_t n = send(bufferevent_getfd(c->bev), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            data = (const char *)data + n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            return -1;
        }
    }
    if (len)
        bufferevent_write(c->bev, data, len);
    return 0;
}

static void flush_waiting(struct worker_conn *c)
{
    if (c->bev && c->pend.len && write_raw(c, c->pend.data, c->pend.len) == 0)
        c->unsent = 0;
    buf_reset(&c->pend);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    for (size_t i = 0; i < n_waiting; i++) {
        struct worker_conn *c = waiting[i];
        if (c) {
            flush_waiting(c);
            c->listed = 0;
        }
    }
    n_waiting = 0;
}

int worker_out_init(void)
{
    if (!flush_ev)
        flush_ev = event_new(srv->base, -1, 0, on_flush, NULL);
    return flush_ev ? 0 : -1;
}

void worker_out_shutdown(void)
{
    if (flush_ev)
        event_free(flush_ev);
    flush_ev = NULL;
    free(waiting);
    waiting = NULL;
    n_waiting = cap_waiting = 0;
}

struct buf *worker_out_batch_buf(struct worker_conn *c)
{
    return &c->pend;
}

void worker_out_batch_end(struct worker_conn *c, int jobs)
{
    c->unsent += jobs;
    /* closed: nothing goes; not set up (outside the loop): no end of turn to wait for */
    if (!c->bev || !flush_ev) {
        flush_waiting(c);
        return;
    }
    if (c->listed)
        return;
    if (n_waiting == cap_waiting) {
        cap_waiting = cap_waiting ? 2 * cap_waiting : 16;
        waiting = xrealloc(waiting, cap_waiting * sizeof(*waiting));
    }
    waiting[n_waiting++] = c;
    c->listed = 1;
    if (n_waiting == 1)
        event_active(flush_ev, EV_WRITE, 1);
}

void worker_out_now(struct worker_conn *c, const void *data, size_t len)
{
    if (!c->bev)
        return;
    flush_waiting(c); /* its slot in `waiting` stays, with nothing left to send */
    write_raw(c, data, len);
}

/* The shutdown() makes the worker see EOF now: bufferevent_free() closes the fd from a
 * finalizer on the loop, which never runs once the loop has exited (server shutdown). */
void worker_out_close(struct worker_conn *c)
{
    if (c->listed) {
        for (size_t i = 0; i < n_waiting; i++)
            if (waiting[i] == c)
                waiting[i] = NULL;
        c->listed = 0;
    }
    buf_free(&c->pend);
    if (c->bev) {
        evutil_socket_t fd = bufferevent_getfd(c->bev);
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
}
