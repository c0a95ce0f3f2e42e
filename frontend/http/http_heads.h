/*
 * http_heads: one budget for the memory that unfinished request heads hold, on every HTTP
 * listener together. Before its head is complete no request is authenticated, yet each may
 * hold up to HTTP_LINE_MAX + HTTP_HEAD_MAX bytes for as long as evhttp's timeout allows: 19,000
 * connections sending heads slowly held 1.7 GB for 130 s. The heads in progress are tracked
 * from the moment evhttp creates their request until the head is complete (or the request is
 * freed); every HEADS_TICK_MS their bytes are counted (headers parsed so far and the unparsed
 * input), and while the total is over max_pending_heads_size the connections holding the most
 * are closed, largest first. A normal client's head is a few hundred bytes and complete within
 * a round trip, so it is never the one closed.
 *
 * Loop thread only.
 */
#ifndef TS_HTTP_HEADS_H
#define TS_HTTP_HEADS_H

struct evhttp_request;

/* Starts the tick (after the listeners exist); stop before they are freed. */
void http_heads_start(void);
void http_heads_stop(void);
/* A request of one of our listeners was created: its head is in progress. */
void http_heads_track(struct evhttp_request *req);
/* Its head is complete. */
void http_heads_done(struct evhttp_request *req);
/* Bytes the heads in progress hold now. */
long http_heads_bytes(void);

#endif
