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

struct look {
    int epfd, maxevents;
    struct epoll_event *events;
};

static int look_once(void *arg)
{
    struct look *l = arg;
    return epoll_pwait(l->epfd, l->events, l->maxevents, 0, NULL);
}

/* a blocking wait on the loop's thread: look first, then sleep for what is left of timeout */
static int busy_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    int64_t t0 = ts_now_us();
    struct look l = {epfd, maxevents, events};
    int n = busy_poll_spin(loop_bp, t0, timeout < 0 ? -1 : (int64_t)timeout * 1000, look_once, &l);
    if (n == 0) {
        if (timeout > 0) {
            int64_t left = (int64_t)timeout * 1000 - (ts_now_us() - t0);
            timeout = left > 0 ? (int)((left + 999) / 1000) : 0;
        }
        n = epoll_pwait(epfd, events, maxevents, timeout, NULL);
    }
    int e = errno;
    busy_poll_done(loop_bp, t0, n);
    errno = e;
    return n;
}

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    int n = loop_bp && timeout != 0 ? busy_wait(epfd, events, maxevents, timeout)
                                    : epoll_pwait(epfd, events, maxevents, timeout, NULL);
    loop_wait_observer_fn *fn = __atomic_load_n(&observer, __ATOMIC_RELAXED);
    if (fn) {
        int e = errno;
        fn(epfd, n);
        errno = e;
    }
    return n;
}
