/*
 * conn_budget: one budget of file descriptors for the connections of every listener, HTTP and
 * gRPC, so that the process keeps descriptors for what is not a connection and never hits
 * EMFILE on a listener (gRPC core 1.51 stops accepting for good after one EMFILE; workers,
 * LMDB and logs need descriptors too).
 *
 * Connections may hold descriptors below the cap; the ones above are the reserve. The cap is
 * base + max_connections when that key is set (base: the descriptors open at start), else
 * the fd limit less a reserve of limit/8 (64..1024). The limit is read again at each check, so a
 * limit lowered under a running server (prlimit) lowers the cap at once. gRPC connections may
 * hold at most half of what is above base: HTTP is still served while gRPC holds its share.
 *
 * The kernel hands out the lowest free descriptor, and the fd limit bounds descriptor numbers,
 * so "the lowest free descriptor is below the cap" is the test for one more connection.
 *
 * Thread-safe: gRPC accepts on the thread that drives its poller (grpc_drive.h).
 */
#ifndef TS_CONN_BUDGET_H
#define TS_CONN_BUDGET_H

/* Raises the soft fd limit to the hard one, notes the descriptors open now and logs the budget.
 * max_connections: config's (0 = derived). Once, at start, before any listener. */
void conn_budget_init(int max_connections);
/* The cap now: a connection may hold a descriptor below it. */
int conn_budget_cap(void);
/* 1 when the lowest free descriptor is at or above the cap (the listeners wait). */
int conn_budget_full(void);
/* The most gRPC connections held at once. */
int conn_budget_grpc_max(void);
/* fd was just accepted on a gRPC listener: 1 when it may be served (counted until it is
 * closed), 0 when it is over the budget and must be closed at once. */
int conn_budget_grpc_admit(int fd);
/* gRPC connections held now (closed ones are noticed when the count reaches the limit). */
int conn_budget_grpc_held(void);

#endif
