/*
 * loop_wait: the frontend's epoll_wait (see loop_wait.h).
 */
#include "loop_wait.h"

#include <errno.h>
#include <stddef.h>
#include <sys/epoll.h>

#include "busy_poll.h"
#include "util.h"

static __thread struct busy_poll *loop_bp; /* set on the loop's thread only */
static struct busy_poll bp;
static loop_wait_observer_fn *observer; /* set on the loop's thread, read on any: atomics */

void loop_wait_busy_poll(int64_t budget_us)
{
    busy_poll_init(&bp, budget_us);
    loop_bp = budget_us > 0 ? &bp : NULL;
}

void loop_wait_observe(loop_wait_observer_fn *fn)
{
    __atomic_store_n(&observer, fn, __ATOMIC_RELAXED);
}

struct wait {
    int epfd, maxevents;
    struct epoll_event *events;
};

static int look_once(void *arg)
{
    struct wait *w = arg;
    return epoll_pwait(w->epfd, w->events, w->maxevents, 0, NULL);
}

/* what is left of the wait, rounded up to epoll's milliseconds */
static int block(void *arg, int64_t left_us)
{
    struct wait *w = arg;
    return epoll_pwait(w->epfd, w->events, w->maxevents,
                       left_us < 0 ? -1 : (int)((left_us + 999) / 1000), NULL);
}

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    struct wait w = {epfd, maxevents, events};
    /* a wait that may block, on the loop's thread: look first */
    int n = loop_bp && timeout != 0
                ? busy_poll_wait(loop_bp, ts_now_us(), timeout < 0 ? -1 : (int64_t)timeout * 1000,
                                 look_once, block, &w)
                : epoll_pwait(epfd, events, maxevents, timeout, NULL);
    loop_wait_observer_fn *fn = __atomic_load_n(&observer, __ATOMIC_RELAXED);
    if (fn) {
        int e = errno;
        fn(epfd, n);
        errno = e;
    }
    return n;
}
