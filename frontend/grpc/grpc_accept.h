/*
 * grpc_accept: gRPC's listeners inside the connection budget (core/conn_budget.h).
 *
 * gRPC core 1.51 accepts in its poller with accept4, through its PLT, until EAGAIN; on any other
 * error (EMFILE, ENFILE, ENOMEM, ...) it logs "Failed accept4" and never accepts on that port
 * again, and it has no cap on connections. The frontend defines accept4 (linked with -rdynamic):
 * on a gRPC listener it admits a connection only within the budget, closes the ones over it at
 * once (as gRPC itself drops connections under memory pressure in later versions), and turns
 * every error but EINTR and ECONNABORTED into EAGAIN. On EMFILE or ENFILE it takes the
 * connection that waits with a spare descriptor kept for that and closes it, so the backlog is
 * drained and the listener's next connection wakes gRPC again. Every other listener's accept4
 * (libevent's HTTP listeners) is the system call, unchanged.
 *
 * Thread-safe: gRPC accepts on the thread that drives its poller (grpc_drive.h).
 */
#ifndef TS_GRPC_ACCEPT_H
#define TS_GRPC_ACCEPT_H

/* The spare descriptor; before the gRPC servers start. */
void grpc_accept_init(void);
/* A port gRPC listens on (what grpc_server_add_http2_port returned). */
void grpc_accept_watch_port(int port);
/* Forgets the ports; closes the spare descriptor. */
void grpc_accept_shutdown(void);

#endif
