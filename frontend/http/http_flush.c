/*
 * http_flush: a whole reply leaves in the loop turn that made it (see http_flush.h).
 */
#include "http_flush.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/core.h"
#include "util.h"

static struct event *flush_ev;
/* connections with a reply sent this turn; each holds a reference, so a connection evhttp frees
 * in the meantime is still a valid (callback-less) bufferevent here. evhttp frees a connection
 * mid-turn only through evhttp_connection_fail_, which disables its events first, so a held
 * bufferevent keeps no interest in an fd number the kernel may hand out again; frontend code
 * must not call evhttp_connection_free on a connection with a reply in flight either. */
static struct bufferevent **pending;
static size_t n_pending, cap_pending;

/* What libevent's socket bufferevent does when epoll reports the socket writable, done now: the
 * output leaves; once it is all gone, the write interest is dropped and evhttp's write callback
 * finishes the request (logs, frees it, reads the next one or closes). */
static void flush_one(struct bufferevent *bev)
{
    bufferevent_data_cb rcb, wcb;
    bufferevent_getcb(bev, &rcb, &wcb, NULL, NULL);
    /* evhttp clears the read callback while a reply is leaving: anything else means the
     * connection moved on (freed, or reading again) */
    if (rcb || !wcb || !(bufferevent_get_enabled(bev) & EV_WRITE))
        return;
    struct evbuffer *out = bufferevent_get_output(bev);
    if (evbuffer_get_length(out) == 0)
        return;
    /* the socket bufferevent keeps its output's front frozen so that only it drains it */
    evbuffer_unfreeze(out, 1);
    int n = evbuffer_write(out, bufferevent_getfd(bev));
    evbuffer_freeze(out, 1);
    /* a part left, or an error: libevent goes on as before when the socket reports */
    if (n <= 0 || evbuffer_get_length(out) > 0)
        return;
    bufferevent_disable(bev, EV_WRITE);
    bufferevent_trigger(bev, EV_WRITE, 0);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    /* a completion may send another reply, which appends: index, not a saved end */
    for (size_t i = 0; i < n_pending; i++) {
        flush_one(pending[i]);
        bufferevent_decref(pending[i]);
    }
    n_pending = 0;
}

int http_flush_init(void)
{
    flush_ev = event_new(srv->base, -1, 0, on_flush, NULL);
    return flush_ev ? 0 : -1;
}

void http_flush_later(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    if (!flush_ev || !bev || bufferevent_openssl_get_ssl(bev))
        return;
    if (n_pending == cap_pending) {
        cap_pending = cap_pending ? 2 * cap_pending : 64;
        pending = xrealloc(pending, cap_pending * sizeof(*pending));
    }
    bufferevent_incref(bev);
    pending[n_pending++] = bev;
    if (n_pending == 1)
        event_active(flush_ev, EV_WRITE, 1);
}

void http_flush_stop(void)
{
    for (size_t i = 0; i < n_pending; i++)
        bufferevent_decref(pending[i]);
    n_pending = cap_pending = 0;
    free(pending);
    pending = NULL;
    if (flush_ev)
        event_free(flush_ev);
    flush_ev = NULL;
}
