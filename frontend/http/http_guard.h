/*
 * http_guard: the limits every HTTP request and connection meets, on the three listeners.
 *
 * Requests. evhttp (libevent 2.1) reads a whole request before our handlers run, so:
 *   - the head (request line and headers) may take at most HTTP_LINE_MAX + HTTP_HEAD_MAX bytes,
 *     and a body at most max_request_size bytes: evhttp refuses more from the headers, before
 *     buffering the body (413), and reads and discards the rest of a refused body so that the
 *     client reads the answer rather than a reset;
 *   - http_guard_check, first thing in each listener's handler, refuses a target over 8 KiB
 *     (414), a header line over 8 KiB or more than 100 headers (431), a target with an encoded or
 *     raw NUL or control byte (400), a Content-Length that is not plain digits or that is given
 *     twice with different values, Content-Length together with Transfer-Encoding (400: RFC 9112
 *     section 6.3, no request smuggling) and codings other than chunked (501). Each refusal closes
 *     the connection, so bytes left over from a refused request never run as a request.
 *   - libevent's own error replies (HTML pages for a malformed request, a head or body over the
 *     limits, a method we do not serve) become our JSON error body: the frontend defines
 *     evhttp_send_error, which libevent calls through its PLT (see http_guard.c).
 *
 * Connections. At start the soft fd limit is raised to the hard limit. The HTTP listeners stop
 * accepting while the process holds max_connections descriptors (config; by default the fd limit
 * less a reserve for workers, LMDB and gRPC), and pause for 100 ms on EMFILE or ENFILE instead
 * of spinning on accept(), logging at most once per second.
 * Loop thread only.
 */
#ifndef TS_HTTP_GUARD_H
#define TS_HTTP_GUARD_H

struct evhttp;
struct evhttp_request;
struct evhttp_bound_socket;

/* nginx's large_client_header_buffers and Netty's defaults are of this order */
#define HTTP_LINE_MAX 8192
#define HTTP_HEAD_MAX 65536
#define HTTP_HEADERS_MAX 100

/* Raises the fd limit and derives the connection cap. */
void http_guard_init(void);
/* Sets the request limits on h and watches its listening socket. */
/* tls: the listener's OpenSSL context (http_tls.h), NULL for plain http. */
struct ssl_ctx_st;
void http_guard_attach(struct evhttp *h, struct evhttp_bound_socket *bound, struct ssl_ctx_st *tls);
/* Stops the pause timer (before the listeners are freed). */
void http_guard_shutdown(void);
/* 0 when req may proceed; else it has been answered (4xx/5xx, connection closed). */
int http_guard_check(struct evhttp_request *req);
/* The cap in force: the listeners accept while fewer descriptors than this are open. */
int http_guard_max_connections(void);

#endif
