/*
 * http_heads: the budget of unfinished request heads (see http_heads.h).
 *
 * The tracked requests are a hash set of pointers (open addressing, linear probing, deletion by
 * moving the entries of the run back): a tick walks it, and each head that completes or request
 * that is freed finds its entry in O(1). evhttp frees a request whose connection dies through
 * evhttp_request_free, which libevent 2.1 calls through its PLT: this module defines it in the
 * executable (linked with -rdynamic) to forget the request first.
 */
#include "http_heads.h"

#include <dlfcn.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"
#include "log.h"
#include "util.h"

#define HEADS_TICK_MS 200
/* what a parsed header costs beyond its text: the evkeyval and two allocations */
#define HEADER_OVERHEAD 64

struct entry {
    struct evhttp_request *req;
    int64_t since_us;
};

static struct entry *tab;
static size_t cap, used;
static struct event *tick;
static int64_t last_log_us;
static long closed_since_log;

static size_t slot_of(const struct evhttp_request *req)
{
    uintptr_t h = (uintptr_t)req;
    h ^= h >> 17;
    h *= (uintptr_t)0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 7) & (cap - 1);
}

static void grow(void)
{
    struct entry *old = tab;
    size_t oldcap = cap;
    cap = cap ? cap * 2 : 256;
    tab = xcalloc(cap, sizeof(*tab));
    used = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].req) {
            size_t s = slot_of(old[i].req);
            while (tab[s].req)
                s = (s + 1) & (cap - 1);
            tab[s] = old[i];
            used++;
        }
    free(old);
}

void http_heads_track(struct evhttp_request *req)
{
    if ((used + 1) * 2 > cap)
        grow();
    size_t s = slot_of(req);
    while (tab[s].req && tab[s].req != req)
        s = (s + 1) & (cap - 1);
    if (!tab[s].req)
        used++;
    tab[s].req = req;
    tab[s].since_us = ts_now_us();
}

void http_heads_done(struct evhttp_request *req)
{
    if (!cap)
        return;
    size_t s = slot_of(req);
    while (tab[s].req && tab[s].req != req)
        s = (s + 1) & (cap - 1);
    if (!tab[s].req)
        return;
    tab[s].req = NULL;
    used--;
    /* move back the entries of the run that follow, so that every lookup still finds its own */
    for (size_t j = (s + 1) & (cap - 1); tab[j].req; j = (j + 1) & (cap - 1)) {
        size_t home = slot_of(tab[j].req);
        /* j's entry may move to s when its home is not in (s, j] (cyclically) */
        if ((j > s && (home <= s || home > j)) || (j < s && home <= s && home > j)) {
            tab[s] = tab[j];
            tab[j].req = NULL;
            s = j;
        }
    }
}

/* What one unfinished head holds: the headers evhttp has parsed and the input it has not. */
static long head_bytes(struct evhttp_request *req)
{
    long n = 0;
    const struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next)
    n += (long)(strlen(h->key) + strlen(h->value)) + HEADER_OVERHEAD;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    if (bev)
        n += (long)evbuffer_get_length(bufferevent_get_input(bev));
    const char *uri = evhttp_request_get_uri(req);
    if (uri)
        n += (long)strlen(uri);
    return n;
}

long http_heads_bytes(void)
{
    long total = 0;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].req)
            total += head_bytes(tab[i].req);
    return total;
}

static int by_bytes_desc(const void *a, const void *b)
{
    const long *x = a, *y = b;
    return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : 0;
}

/* Closes the connections of the largest heads until the total is back under 3/4 of the
 * budget. The connection fails as if the client had gone; evhttp frees it. */
static void over_budget(long total, long budget)
{
    long(*v)[2] = xmalloc(used * sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].req) {
            v[n][0] = head_bytes(tab[i].req);
            v[n++][1] = (long)i;
        }
    qsort(v, n, sizeof(*v), by_bytes_desc);
    long closed = 0;
    for (size_t k = 0; k < n && total > budget / 4 * 3; k++) {
        struct evhttp_request *req = tab[v[k][1]].req;
        struct evhttp_connection *c = evhttp_request_get_connection(req);
        struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        if (fd < 0)
            continue;
        shutdown(fd, SHUT_RDWR);
        total -= v[k][0];
        closed++;
    }
    free(v);
    closed_since_log += closed;
    int64_t now = ts_now_us();
    if (now - last_log_us >= 1000000) {
        LOG_WARN("unfinished request heads held more than max_pending_heads_size (%ld bytes): "
                 "closed the %ld connections with the largest heads since the last report",
                 budget, closed_since_log);
        last_log_us = now;
        closed_since_log = 0;
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (!used)
        return;
    long budget = srv->cfg.max_pending_heads_size;
    long total = http_heads_bytes();
    if (total > budget)
        over_budget(total, budget);
}

void http_heads_start(void)
{
    if (tick)
        return;
    tick = event_new(srv->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, HEADS_TICK_MS * 1000};
    event_add(tick, &tv);
}

void http_heads_stop(void)
{
    if (tick)
        event_free(tick);
    tick = NULL;
    free(tab);
    tab = NULL;
    cap = used = 0;
}

typedef void (*request_free_fn)(struct evhttp_request *);

void evhttp_request_free(struct evhttp_request *req)
{
    static request_free_fn next;
    if (!next && !(*(void **)&next = dlsym(RTLD_NEXT, "evhttp_request_free"))) {
        LOG_ERROR("evhttp_request_free: %s", dlerror());
        abort();
    }
    if (req)
        http_heads_done(req);
    next(req);
}
