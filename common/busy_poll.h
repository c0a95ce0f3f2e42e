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

/* A wait that started at start_us and may last limit_us (< 0: no limit) looks for its event
 * with look(arg) (which does not block: > 0 found, < 0 an error, 0 nothing) for up to the
 * budget, when the last wait was short enough. look's last result; 0 when it did not look. */
int busy_poll_spin(struct busy_poll *bp, int64_t start_us, int64_t limit_us, int (*look)(void *),
                   void *arg);

/* The wait that started at start_us is over: result > 0, an event came; 0, its timeout ran out
 * (no event: the next wait sleeps at once, or a timer shorter than the budget would keep a
 * server that has nothing to do looking for ever); < 0, an error. */
void busy_poll_done(struct busy_poll *bp, int64_t start_us, int result);

#endif
