/*
 * http_guard: the limits every HTTP request and connection meets, on the three listeners.
 *
 * Requests. evhttp (libevent 2.1) reads a whole request before our handlers run, so:
 *   - the head (request line and headers) may take at most HTTP_LINE_MAX + HTTP_HEAD_MAX bytes,
 *     and a body at most max_request_size bytes: evhttp refuses more from the headers, before
 *     buffering the body (413), and reads and discards the rest of a refused body so that the
 *     client reads the answer rather than a reset;
 *   - a request that announces a body is judged from its head, before the body is read: the
 *     checks below and the token (401) refuse it the way evhttp refuses a body over the limit
 *     (the body read and dropped, never buffered, then the answer). evhttp 2.1 has no hook for
 *     a server request's head; the frontend gets one by wrapping evhttp_request_new, which
 *     libevent calls through its PLT, and giving each request of our listeners a header_cb.
 *   - http_guard_check, first thing in each listener's handler, refuses an HTTP version other
 *     than 1.x (400, as nginx), a target over 8 KiB (414), a header line over 8 KiB or more
 *     than 100 headers (431), a target with an encoded or raw NUL or control byte (400), a
 *     Content-Length that is not plain digits or that is given twice with different values,
 *     Content-Length together with Transfer-Encoding (400: RFC 9112 section 6.3, no request
 *     smuggling) and codings other than chunked (501). Each refusal closes the connection, so
 *     bytes left over from a refused request never run as a request.
 *   - a chunk size that is not hex or does not fit 63 bits is a malformed body (400), one over
 *     max_request_size a body too large (413): libevent 2.1 answers both 413, so the frontend
 *     reads chunk sizes itself (its evutil_strtoll, see http_guard.c).
 *   - libevent's own error replies (HTML pages for a malformed request, a head or body over the
 *     limits, a method we do not serve) become our JSON error body: the frontend defines
 *     evhttp_send_error, which libevent calls through its PLT (see http_guard.c).
 *
 * Connections. The HTTP listeners stop accepting while connections hold the descriptors of
 * the budget they share with gRPC (core/conn_budget.h: max_connections, or the fd limit less a
 * reserve for workers, LMDB and gRPC's own), and pause for 100 ms on EMFILE or ENFILE instead of
 * spinning on accept(), logging at most once per second.
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

/* token_scope of a listener whose requests need no token (metrics) */
#define HTTP_NO_TOKEN (-1)

/* Sets the request limits on h and watches its listening socket. tls: the listener's OpenSSL
 * context (http_tls.h), NULL for plain http. token_scope: the enum auth_scope its requests need,
 * or HTTP_NO_TOKEN. */
struct ssl_ctx_st;
void http_guard_attach(struct evhttp *h, struct evhttp_bound_socket *bound, struct ssl_ctx_st *tls,
                       int token_scope);
/* Stops the pause timer (before the listeners are freed). */
void http_guard_shutdown(void);
/* 0 when req may proceed; else it has been answered (4xx/5xx, connection closed). */
int http_guard_check(struct evhttp_request *req);

#endif
