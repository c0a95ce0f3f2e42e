/*
 * busy_poll: look for the next event for a while before sleeping (see busy_poll.h).
 */
#include "busy_poll.h"

#include <errno.h>
#include <sched.h>

#include "util.h"

void busy_poll_init(struct busy_poll *bp, int64_t budget_us)
{
    bp->budget_us = budget_us > 0 ? budget_us : 0;
    bp->last_wait_us = 0;
}

/* looks for up to the budget (or limit_us), yielding the CPU between looks; look's last result,
 * 0 when it did not look */
static int spin(const struct busy_poll *bp, int64_t start_us, int64_t limit_us, int (*look)(void *),
                void *arg)
{
    if (bp->budget_us == 0 || bp->last_wait_us > bp->budget_us || limit_us == 0)
        return 0;
    int64_t span = limit_us > 0 && limit_us < bp->budget_us ? limit_us : bp->budget_us;
    int r;
    while ((r = look(arg)) == 0 && ts_now_us() - start_us < span)
        sched_yield();
    return r;
}

int busy_poll_wait(struct busy_poll *bp, int64_t start_us, int64_t limit_us, int (*look)(void *),
                   int (*block)(void *, int64_t left_us), void *arg)
{
    int n = spin(bp, start_us, limit_us, look, arg);
    if (n == 0) {
        int64_t left = limit_us < 0 ? -1 : limit_us - (ts_now_us() - start_us);
        n = block(arg, limit_us >= 0 && left < 0 ? 0 : left);
    }
    int e = errno; /* clock_gettime leaves it alone, but say so */
    bp->last_wait_us = n == 0 ? bp->budget_us + 1 : ts_now_us() - start_us;
    errno = e;
    return n;
}
