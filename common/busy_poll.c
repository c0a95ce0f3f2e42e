/*
 * busy_poll: look for the next event for a while before sleeping (see busy_poll.h).
 */
#include "busy_poll.h"

#include <sched.h>

#include "util.h"

void busy_poll_init(struct busy_poll *bp, int64_t budget_us)
{
    bp->budget_us = budget_us > 0 ? budget_us : 0;
    bp->last_wait_us = 0;
}

int busy_poll_spin(struct busy_poll *bp, int64_t start_us, int64_t limit_us, int (*look)(void *),
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

void busy_poll_done(struct busy_poll *bp, int64_t start_us, int result)
{
    bp->last_wait_us = result == 0 ? bp->budget_us + 1 : ts_now_us() - start_us;
}
