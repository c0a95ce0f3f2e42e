/*
 * loop_wait: the frontend's epoll_wait.
 *
 * libevent and gRPC's epoll1 poller both call epoll_wait through their PLT, so they reach the
 * definition in loop_wait.c, as they reach the functions http_fmt.c defines. It is epoll_pwait
 * with no signal mask (the same call, epoll_wait(2)); around it:
 *   - on the thread that runs the event loop, a wait that may block first looks for events
 *     without blocking for up to busy_poll_us (common/busy_poll.h);
 *   - an observer sees every wait's fd and result (grpc_drive: whether gRPC's set was empty).
 * The result and errno are the kernel's.
 */
#ifndef TS_LOOP_WAIT_H
#define TS_LOOP_WAIT_H

#include <stdint.h>

/* The calling thread runs the event loop: its blocking waits look first for budget_us (0:
 * never). */
void loop_wait_busy_poll(int64_t budget_us);

/* fn(epfd, result) after every epoll_wait, on the thread that waited; NULL: none. */
typedef void loop_wait_observer_fn(int epfd, int result);
void loop_wait_observe(loop_wait_observer_fn *fn);

#endif
