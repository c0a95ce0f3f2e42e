/*
 * grpc_drive: who runs gRPC's completion queue, and how its completions reach the loop thread.
 *
 * Two drives, chosen at start-up (grpc_drive_init / grpc_drive_start):
 *   - loop: gRPC's "epoll1" poller keeps every gRPC socket in one epoll set, and the loop thread
 *     watches that epoll fd and drains the queue without blocking. Fast (no thread crossing), but
 *     it relies on an internal of gRPC: the fd is not public.
 *   - thread: a completion-queue thread blocks in grpc_completion_queue_next and hands each
 *     completion to the loop through an eventfd mailbox. Portable: any gRPC build, any poll
 *     engine. Chosen when TS_GRPC_DRIVE=thread, when GRPC_POLL_STRATEGY names another engine,
 *     or when the poller's fd cannot be found or does not watch the listeners.
 * Either way every completion is handled on the loop thread (by the handle function given to
 * grpc_drive_start), so the call state machine and the services need no lock.
 *
 * Loop thread only, but for the CQ thread inside grpc_drive.c.
 */
#ifndef TS_GRPC_DRIVE_H
#define TS_GRPC_DRIVE_H

#include <grpc/grpc.h>

typedef void grpc_drive_handle_fn(void *tag, int success);

/* grpc_init, with the epoll1 engine when the loop drive may be used. */
void grpc_drive_init(void);

/* Abseil's debug-only mutex deadlock detection off (grpc_absl.cpp); before grpc_init. */
void grpc_absl_release_mode(void);
/* Starts delivering cq's completions to handle, once the servers are started with n_listeners
 * listening sockets. Logs which drive runs and why. 0, or -1 after logging why. */
int grpc_drive_start(grpc_completion_queue *cq, int n_listeners, grpc_drive_handle_fn *handle);
/* gRPC was used outside a completion (a batch started when a worker answered, a call unref'ed):
 * the loop drive drains once this loop turn's callbacks are done; the thread drive needs
 * nothing. */
void grpc_drive_soon(void);
/* Calls are under way (busy) or not: the loop drive's tick runs faster while they are. */
void grpc_drive_busy(int busy);
/* Stops the drive (the thread is joined, completions it handed over are handled); afterwards the
 * caller drives cq itself, as the loop no longer runs. */
void grpc_drive_stop(void);
/* "loop" or "thread", for logs and tests. */
const char *grpc_drive_name(void);

#endif
