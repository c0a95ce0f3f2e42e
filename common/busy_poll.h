/*
 * busy_poll: look for the next event for a while before sleeping until it comes
 * (config.properties busy_poll_us; the frontend's loop and every worker).
 *
 * A process that sleeps until its next event pays for it when the event comes: the wake-up
 * itself and, on a virtual machine, an idle vCPU that the host must wake first. Under a steady
 * stream of work the next event usually comes within tens of microseconds, and looking for it
 * without sleeping catches it with no wake-up at all. Between two looks the process yields its
 * CPU (sched_yield), so it never keeps a runnable process from that CPU. It looks only while
 * events come quickly: once a wait has lasted longer than the budget, or ended on its timeout
 * with no event, the next one sleeps at once, so an idle server sleeps after at most one
 * budget of looking.
 */
#ifndef TS_BUSY_POLL_H
#define TS_BUSY_POLL_H

#include <stdint.h>

struct busy_poll {
    int64_t budget_us;    /* how long to look; 0: never */
    int64_t last_wait_us; /* the last wait, from its start to its event or its timeout */
};

void busy_poll_init(struct busy_poll *bp, int64_t budget_us);

/* One wait for an event, started at start_us, that may last limit_us (< 0: no limit). When the
 * last wait was short enough it first looks with look(arg), which does not block, for up to the
 * budget; when that found nothing, block(arg, left_us) sleeps for what is left (left_us < 0: no
 * limit, else >= 0). Both return > 0 for an event, 0 for nothing (a timeout), < 0 for an error
 * with errno set; the result is the last one's, errno as it left it. A wait that ends on its
 * timeout makes the next one sleep at once: a timer shorter than the budget would otherwise
 * keep a server that has nothing to do looking for ever. */
int busy_poll_wait(struct busy_poll *bp, int64_t start_us, int64_t limit_us, int (*look)(void *),
                   int (*block)(void *, int64_t left_us), void *arg);

#endif
