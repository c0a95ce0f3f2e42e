/*
 * http_flush: a whole reply leaves in the loop turn that made it.
 *
 * evhttp_send_reply puts the reply in the connection's output and asks epoll to report the
 * socket writable (one epoll_ctl); the write happens in the next loop turn, after which the
 * write interest is dropped again (a second epoll_ctl) and evhttp finishes the request. At the
 * end of the turn that sent the reply, http_flush writes it the way libevent's socket
 * bufferevent would on that report, and when everything left, drops the write interest and
 * runs the same completion. libevent's epoll changelist folds the interest added and dropped
 * in one turn into no system call at all.
 *
 * Only plain-TCP connections: a TLS reply is encrypted by its bufferevent. A reply that does
 * not leave in full (a full socket buffer, an error) stays with libevent, as before.
 */
#ifndef TS_HTTP_FLUSH_H
#define TS_HTTP_FLUSH_H

#include <event2/http.h>

/* Sets up on srv->base; 0, or -1. */
int http_flush_init(void);

/* Call before evhttp_send_reply(req, ...): the reply is written at the end of this turn. */
void http_flush_later(struct evhttp_request *req);

/* Drops what is pending (the connections are libevent's); the event goes. */
void http_flush_stop(void);

#endif
