/*
 * http_guard: request and connection limits (see http_guard.h).
 */
#include "http_guard.h"
#include "http_heads.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* the request's HTTP version (libevent 2.1 has no getter) */
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <limits.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/conn_budget.h"
#include "core/core.h"
#include "http_openai.h"
#include "http_openai_out.h"
#include "http_reply.h"
#include "http_token.h"
#include "log.h"
#include "mgmt/auth.h"
#include "util.h"

#define MAX_LISTENERS 3
#define PAUSE_MS 100

static struct evconnlistener *listeners[MAX_LISTENERS];
static int n_listeners;
static int paused; /* listeners disabled: EMFILE or the cap */
static struct event *resume_ev;
static int64_t last_log_us;
static long suppressed; /* log lines not written since the last one */

/* the evhttp of each listener and the token its requests need */
static struct {
    const struct evhttp *h;
    int token_scope;
} served[MAX_LISTENERS];
static int n_served;
static int heads_seen; /* the head hook runs (evhttp_request_new is ours) */
/* the chunk-size line refused last (printable copy), "" when none: read by evhttp_send_error,
 * which libevent calls at once for it, and cleared there and at each new head */
static char bad_chunk_size[40];

/* at most one line per second; the lines in between are counted */
static void log_limited(const char *what)
{
    int64_t now = ts_now_us();
    if (now - last_log_us < 1000000) {
        suppressed++;
        return;
    }
    if (suppressed)
        LOG_WARN("%s (%ld more since the last report); accepting paused for %d ms", what,
                 suppressed, PAUSE_MS);
    else
        LOG_WARN("%s; accepting paused for %d ms", what, PAUSE_MS);
    last_log_us = now;
    suppressed = 0;
}

static void set_accepting(int on)
{
    for (int i = 0; i < n_listeners; i++) {
        if (on)
            evconnlistener_enable(listeners[i]);
        else
            evconnlistener_disable(listeners[i]);
    }
    paused = !on;
}

static void pause_accepting(void)
{
    if (!paused)
        set_accepting(0);
    struct timeval tv = {0, PAUSE_MS * 1000};
    evtimer_add(resume_ev, &tv);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (conn_budget_full()) {
        log_limited("at the connection cap (max_connections)");
        pause_accepting();
        return;
    }
    set_accepting(1);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)l;
    (void)arg;
    int e = EVUTIL_SOCKET_ERROR();
    char what[128];
    snprintf(what, sizeof(what), "accept(): %s", strerror(e));
    log_limited(what);
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)
        pause_accepting();
}

/* evhttp calls this for each accepted connection, just after accept(): the place to notice
 * that the cap is reached. The connection itself is served; the next ones wait in the backlog. */
static struct bufferevent *on_connection(struct event_base *base, void *arg)
{
    SSL_CTX *tls = arg;
    if (!paused && conn_budget_full()) {
        log_limited("at the connection cap (max_connections)");
        pause_accepting();
    }
    if (!tls)
        return NULL; /* evhttp makes its own bufferevent */
    /* evhttp sets the fd, which starts the handshake; freeing the bufferevent closes it */
    SSL *ssl = SSL_new(tls);
    if (!ssl) { /* out of memory, as xmalloc: never serve a TLS port in plain text */
        LOG_ERROR("SSL_new failed");
        abort();
    }
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) { /* NULL would make evhttp serve the connection in plain text */
        LOG_ERROR("bufferevent_openssl_socket_new failed");
        abort();
    }
    return bev;
}

void http_guard_attach(struct evhttp *h, struct evhttp_bound_socket *bound, struct ssl_ctx_st *tls,
                       int token_scope)
{
    if (n_served < MAX_LISTENERS) {
        served[n_served].h = h;
        served[n_served++].token_scope = token_scope;
    }
    evhttp_set_max_headers_size(h, HTTP_LINE_MAX + HTTP_HEAD_MAX);
    evhttp_set_max_body_size(h, srv->cfg.max_request_size);
    /* a refused body is read and dropped, then answered: the client sees the 413, not a reset */
    evhttp_set_flags(h, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_bevcb(h, on_connection, tls);
    if (!resume_ev)
        resume_ev = evtimer_new(srv->base, on_resume, NULL);
    struct evconnlistener *l = evhttp_bound_socket_get_listener(bound);
    if (l && n_listeners < MAX_LISTENERS) {
        evconnlistener_set_error_cb(l, on_accept_error);
        listeners[n_listeners++] = l;
    }
}

void http_guard_shutdown(void)
{
    if (resume_ev)
        event_free(resume_ev);
    resume_ev = NULL;
    n_listeners = 0;
    n_served = 0;
    paused = 0;
}

/* Content-Length: 1 to 18 digits, nothing else (no sign, no list) */
static int plain_length(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 18)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    return 1;
}

/* What is wrong with a request: a status, an exception type and a message for the client. */
/* the type of a refusal answered in OpenAI's error shape (an OpenAI route's token) */
#define OPENAI_REFUSAL "openai"

struct problem {
    int status;
    char type[48];
    char msg[256];
};

static int found(struct problem *p, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int found(struct problem *p, int status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
    va_end(ap);
    p->status = status;
    snprintf(p->type, sizeof(p->type), "%s", type);
    return -1;
}

static const char *const BAD = "BadRequestException";
static const char *const HEADERS_TOO_LARGE = "RequestHeaderFieldsTooLargeException";

static int target_problem(const char *uri, struct problem *pb)
{
    size_t n = strlen(uri);
    if (n > HTTP_LINE_MAX)
        return found(pb, 414, "URITooLongException",
                     "The request target of %zu bytes is longer than %d bytes", n, HTTP_LINE_MAX);
    for (const char *p = uri; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return found(pb, 400, BAD, "The request target contains a control character");
        if (p[0] == '%' && p[1] == '0' && p[2] == '0')
            return found(pb, 400, BAD, "The request target contains an encoded NUL (%%00)");
    }
    return 0;
}

/* evhttp parses any HTTP/x.y with x <= 1, and answers HTTP/0.9 in 0.9 form. nginx refuses a
 * request line that names a major version 0 (400) and one over 1 (505, which evhttp refuses
 * itself as malformed: 400); no model server API can be served without a status line. */
static int version_problem(const struct evhttp_request *req, struct problem *pb)
{
    if (req->major == 1)
        return 0;
    return found(pb, 400, BAD, "HTTP/%d.%d is not supported: HTTP/1.0 and HTTP/1.1 are", req->major,
                 req->minor);
}

/* RFC 9110 section 5.6.2: a field name is a token. 1 for the bytes a token may hold. */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,  ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1,  ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,  ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,  ['d'] = 1, ['e'] = 1,
    ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1,  ['l'] = 1, ['m'] = 1,
    ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1,  ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* The name as the client wrote it, printable, for a message. */
static const char *printable(const char *s, char out[48])
{
    size_t i = 0;
    for (; s[i] && i < 40; i++)
        out[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
    return out;
}

/* A header line evhttp kept that RFC 9112 says to refuse. "Transfer-Encoding : chunked" (a
 * space before the colon) is a header named "Transfer-Encoding " to evhttp, which then reads no
 * body, and the chunks would run as the next request; a NUL in a value ("Bearer KEY\0junk")
 * would end the C string that the token check reads. NUL bytes reach this check as DEL
 * (evbuffer_readln below). */
static int field_problem(const struct evkeyval *h, struct problem *pb)
{
    char nm[48];
    const unsigned char *k = (const unsigned char *)h->key;
    if (!*k)
        return found(pb, 400, BAD, "A request header has an empty name");
    for (; *k; k++)
        if (!tchar[*k])
            return found(pb, 400, BAD,
                         "Invalid request header name '%s': a name is a token, with no space "
                         "(none before the colon either) or control character",
                         printable(h->key, nm));
    for (const unsigned char *v = (const unsigned char *)h->value; *v; v++)
        if ((*v < 0x20 && *v != '\t') || *v == 0x7f)
            return found(pb, 400, BAD,
                         "Request header '%s' contains a NUL or another control character",
                         printable(h->key, nm));
    return 0;
}

/* Also gives, when the headers pass, the Content-Length (NULL if none) and whether the body is
 * chunked. */
static int headers_scan(const struct evkeyvalq *hs, struct problem *pb, const char **length,
                        int *chunked)
{
    const struct evkeyval *h, *cl = NULL, *te = NULL;
    int count = 0;
    TAILQ_FOREACH(h, hs, next)
    {
        if (++count > HTTP_HEADERS_MAX)
            return found(pb, 431, HEADERS_TOO_LARGE, "The request has more than %d headers",
                         HTTP_HEADERS_MAX);
        if (strlen(h->key) + strlen(h->value) + 2 > HTTP_LINE_MAX)
            return found(pb, 431, HEADERS_TOO_LARGE,
                         "Request header '%.40s' is longer than %d bytes", h->key, HTTP_LINE_MAX);
        if (field_problem(h, pb))
            return -1;
        char k0 = (char)(h->key[0] | 0x20); /* most headers are neither: skip strcasecmp */
        if (k0 == 'c' && !strcasecmp(h->key, "Content-Length")) {
            if (!plain_length(h->value))
                return found(pb, 400, BAD,
                             "Invalid Content-Length '%.32s': it must be a plain number", h->value);
            if (cl && strcmp(cl->value, h->value))
                return found(pb, 400, BAD, "Conflicting Content-Length headers (%.20s and %.20s)",
                             cl->value, h->value);
            cl = h;
        } else if (k0 == 't' && !strcasecmp(h->key, "Transfer-Encoding")) {
            if (te || strcasecmp(h->value, "chunked"))
                return found(pb, 501, "NotImplementedException",
                             "Transfer-Encoding '%.32s' is not supported: only a single "
                             "'chunked' is",
                             h->value);
            te = h;
        }
    }
    if (cl && te)
        return found(pb, 400, BAD, "Content-Length and Transfer-Encoding together are ambiguous");
    *length = cl ? cl->value : NULL;
    *chunked = te != NULL;
    return 0;
}

static int headers_problem(const struct evkeyvalq *hs, struct problem *pb)
{
    const char *length;
    int chunked;
    return headers_scan(hs, pb, &length, &chunked);
}

static void answer(struct evhttp_request *req, const struct problem *pb)
{
    if (req->major != 1) { /* an unparsed request line (0.0) or HTTP/0.x: answer in 1.1 */
        req->major = 1;
        req->minor = 1;
    }
    char rid[40];
    http_request_id(req, rid);
    if (!strcmp(pb->type, OPENAI_REFUSAL)) {
        char *body = http_openai_error_json(pb->status, pb->msg, NULL, NULL);
        http_send(req, rid, pb->status, "application/json", body, strlen(body));
        free(body);
        return;
    }
    http_send_error(req, rid, pb->status, pb->type, "%s", pb->msg);
}

static int request_problem(struct evhttp_request *req, struct problem *pb)
{
    return version_problem(req, pb) || target_problem(evhttp_request_get_uri(req), pb) ||
           headers_problem(evhttp_request_get_input_headers(req), pb);
}

/*
 * Judging a request from its head. A refusal decided there is kept in an output header of the
 * request (REFUSAL: "status type message"; the request's URI is gone by the time libevent asks
 * for the answer) and the connection's body limit set to 0: evhttp then reads and drops the
 * body as for any body over the limit (lingering close) and calls evhttp_send_error, which
 * answers with the refusal. A body that ends before that (an empty chunked body) reaches the
 * handler, whose http_guard_check answers it.
 */
#define REFUSAL "X-Torchserve-C-Refusal" /* never sent: taken off before the answer */

static int take_refusal(struct evhttp_request *req, struct problem *pb)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *v = evhttp_find_header(out, REFUSAL);
    if (!v)
        return 0;
    int n = 0;
    if (sscanf(v, "%d %47s %n", &pb->status, pb->type, &n) < 2 || n == 0)
        found(pb, 500, "InternalServerException", "Malformed refusal");
    else
        snprintf(pb->msg, sizeof(pb->msg), "%s", v + n);
    evhttp_remove_header(out, REFUSAL);
    return -1;
}

/* the check of a head whose path is not parsed yet (on_head) */
static int token_refused(struct evhttp_request *req, int scope)
{
    if (!auth_enabled())
        return 0;
    struct http_path p;
    http_path_parse(req, &p);
    int refused = http_token_refused(req, &p, scope);
    http_path_free(&p);
    return refused;
}

static int listener_token_scope(const void *http, int *scope)
{
    for (int i = 0; i < n_served; i++)
        if (served[i].h == http) {
            *scope = served[i].token_scope;
            return 1;
        }
    return 0;
}

/* The header_cb of a request whose head passed on_head: never called (a head is read once);
 * http_guard_check then need not check it again. */
static int head_passed(struct evhttp_request *req, void *arg)
{
    (void)req;
    (void)arg;
    return 0;
}

static int on_head(struct evhttp_request *req, void *http)
{
    heads_seen = 1;
    http_heads_done(req);
    bad_chunk_size[0] = '\0';
    int scope;
    if (!listener_token_scope(http, &scope))
        return 0;
    const struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct problem pb;
    const char *cl = NULL;
    int chunked = 0;
    int bad = version_problem(req, &pb) || target_problem(evhttp_request_get_uri(req), &pb) ||
              headers_scan(in, &pb, &cl, &chunked);
    if (bad) { /* the scan stopped early: the framing headers as evhttp reads them */
        cl = evhttp_find_header(in, "Content-Length");
        chunked = evhttp_find_header(in, "Transfer-Encoding") != NULL;
    }
    if (!chunked && (!cl || cl[strspn(cl, "0")] == '\0')) {
        if (!bad)
            evhttp_request_set_header_cb(req, head_passed);
        return 0; /* no body: nothing to save, http_guard_check answers a problem */
    }
    if (!chunked && plain_length(cl) && atol(cl) > srv->cfg.max_request_size)
        return 0; /* evhttp refuses it from the headers (413 first, as nginx and Netty) */
    if (!bad) {
        if (scope == HTTP_NO_TOKEN || !token_refused(req, scope)) {
            evhttp_request_set_header_cb(req, head_passed);
            return 0;
        }
        /* the OpenAI API's clients read OpenAI's error object */
        found(&pb, AUTH_FAIL_STATUS,
              http_openai_target(evhttp_request_get_uri(req)) ? OPENAI_REFUSAL : AUTH_FAIL_TYPE,
              "%s", AUTH_FAIL_MSG);
    }
    char v[sizeof(pb.type) + sizeof(pb.msg) + 16];
    snprintf(v, sizeof(v), "%d %s %s", pb.status, pb.type, pb.msg);
    if (evhttp_add_header(evhttp_request_get_output_headers(req), REFUSAL, v) == 0)
        evhttp_connection_set_max_body_size(evhttp_request_get_connection(req), 0);
    return 0;
}

/*
 * libevent 2.1 creates each server request with evhttp_request_new(its handler, the evhttp),
 * called through its PLT, and offers no hook between a request's head and its body. This
 * definition in the executable (linked with -rdynamic) takes libevent's place, calls it, and
 * gives the requests of our listeners the head callback that clients' requests have. Where it
 * is not called (a libevent linked with -Bsymbolic), requests are judged after their body,
 * bounded by max_request_size, and http_guard_check says so once in the log.
 */
typedef struct evhttp_request *(*request_new_fn)(void (*)(struct evhttp_request *, void *), void *);

struct evhttp_request *evhttp_request_new(void (*cb)(struct evhttp_request *, void *), void *arg)
{
    static request_new_fn next;
    if (!next && !(*(void **)&next = dlsym(RTLD_NEXT, "evhttp_request_new"))) {
        LOG_ERROR("evhttp_request_new: %s", dlerror());
        abort();
    }
    struct evhttp_request *req = next(cb, arg);
    int scope;
    if (req && listener_token_scope(arg, &scope)) {
        evhttp_request_set_header_cb(req, on_head);
        http_heads_track(req); /* its head is in progress: the heads' budget counts it */
    }
    return req;
}

/*
 * libevent 2.1 reads every line of a request (the request line, each header, chunk sizes and
 * trailers) with evbuffer_readln, through its PLT, and then treats it as a C string: a NUL in
 * a line would cut what every check after it sees ("Authorization: Bearer KEY\0junk" is read as
 * "Bearer KEY"). This definition in the executable (linked with -rdynamic) calls libevent's and
 * turns each NUL of a line into DEL (0x7f), which no request line, header or chunk size may hold
 * either: the checks above refuse it (400), and the string is the whole line again.
 */
typedef char *(*readln_fn)(struct evbuffer *, size_t *, enum evbuffer_eol_style);

char *evbuffer_readln(struct evbuffer *buffer, size_t *n_read_out, enum evbuffer_eol_style eol)
{
    static readln_fn next;
    if (!next && !(*(void **)&next = dlsym(RTLD_NEXT, "evbuffer_readln"))) {
        LOG_ERROR("evbuffer_readln: %s", dlerror());
        abort();
    }
    size_t n = 0;
    char *line = next(buffer, &n, eol);
    if (line)
        for (char *p = memchr(line, '\0', n); p;
             p = memchr(p + 1, '\0', n - (size_t)(p + 1 - line)))
            *p = 0x7f;
    if (n_read_out)
        *n_read_out = n;
    return line;
}

/*
 * libevent 2.1 reads a chunk size with evutil_strtoll(line, &end, 16), through its PLT, and
 * answers 413 both for a size over the limit and for a line that is not a size. Its only
 * base-16 call is that one; this definition reads the size strictly (hex digits, at most
 * 2^63-1) and remembers a bad line for evhttp_send_error (400), which libevent calls at once.
 * A chunk extension (";name=value", RFC 9112 section 7.1.1) is ignored, as a recipient must;
 * libevent 2.1 refuses it. Other bases are strtoll, which is what libevent's is on glibc.
 */
ev_int64_t evutil_strtoll(const char *s, char **endptr, int base)
{
    if (base != 16)
        return strtoll(s, endptr, base);
    const char *p = s;
    int64_t v = 0;
    for (; isxdigit((unsigned char)*p); p++) {
        int d = isdigit((unsigned char)*p) ? *p - '0' : (*p | 0x20) - 'a' + 10;
        if (v > (INT64_MAX - d) / 16)
            goto bad;
        v = v * 16 + d;
    }
    if (p == s)
        goto bad;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == ';')
        p += strlen(p);
    if (*p)
        goto bad;
    if (endptr)
        *endptr = (char *)p;
    return v;
bad:;
    size_t i = 0;
    for (; s[i] && i < 24; i++)
        bad_chunk_size[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    snprintf(bad_chunk_size + i, sizeof(bad_chunk_size) - i, "%s",
             s[i] ? "..."
             : i  ? ""
                  : "(empty)"); /* never "": that means none */
    if (endptr)
        *endptr = (char *)s;
    return -1;
}

int http_guard_check(struct evhttp_request *req)
{
    static int warned;
    if (!heads_seen && !warned) {
        warned = 1;
        LOG_WARN("libevent does not call evhttp_request_new through its PLT: requests are "
                 "judged (token, limits) after their body is read");
    }
    struct problem pb;
    if (take_refusal(req, &pb) == 0 &&
        (req->header_cb == head_passed || request_problem(req, &pb) == 0)) {
        if (req->minor > 1)
            req->minor = 1; /* answered as what we are: HTTP/1.1 (RFC 9110 section 6.2) */
        return 0;
    }
    answer(req, &pb);
    return -1;
}

/*
 * libevent answers the requests it refuses itself (a malformed request line or header, a head
 * or body over evhttp's limits, a method not in evhttp_set_allowed_methods) through
 * evhttp_send_error, with an HTML page. libevent calls it through its PLT, so this definition in
 * the executable (linked with -rdynamic) takes its place, and those answers become our JSON error
 * body with the status that names the problem. It is also the one our code would get.
 */
/* The answer is in the kernel: end the connection, which evhttp then notices and frees. */
static void close_when_sent(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c)
        shutdown(bufferevent_getfd(evhttp_connection_get_bufferevent(c)), SHUT_RDWR);
}

void evhttp_send_error(struct evhttp_request *req, int error, const char *reason)
{
    (void)reason;
    const struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int parsed_line = cmd != 0;
    long max = srv->cfg.max_request_size;
    const char *cl = evhttp_find_header(in, "Content-Length");
    const char *te = evhttp_find_header(in, "Transfer-Encoding");
    struct problem pb;
    if (take_refusal(req, &pb))
        ; /* decided from the head (on_head) */
    else if (cmd & (EVHTTP_REQ_CONNECT | EVHTTP_REQ_TRACE) || (error == 501 && parsed_line))
        found(&pb, 405, "MethodNotAllowedException",
              "The method is not allowed: GET, POST, PUT, DELETE, OPTIONS, HEAD and PATCH are "
              "served");
    else if (parsed_line && headers_problem(in, &pb) != 0)
        ; /* a header says what is wrong */
    else if (error == 413 && cl && atol(cl) > max)
        found(&pb, 413, "RequestEntityTooLargeException",
              "Request body of %.20s bytes exceeds max_request_size (%ld bytes)", cl, max);
    else if (error == 413 && te && bad_chunk_size[0])
        found(&pb, 400, BAD,
              "Invalid chunk size '%s': expected hexadecimal digits, at most 7fffffffffffffff",
              bad_chunk_size);
    else if (error == 413 && te)
        found(&pb, 413, "RequestEntityTooLargeException",
              "Chunked request body exceeds max_request_size (%ld bytes)", max);
    else if (error == 413)
        found(&pb, 431, HEADERS_TOO_LARGE, "The request head is larger than %d bytes",
              HTTP_LINE_MAX + HTTP_HEAD_MAX);
    else if (error == 400 && parsed_line)
        found(&pb, 400, BAD,
              "Malformed request: the HTTP version (1.0 and 1.1 are served), a header line or "
              "the chunked body framing is invalid");
    else if (error == 400)
        found(&pb, 400, BAD,
              "Malformed request line: expected METHOD /target HTTP/1.x in at most %d bytes",
              HTTP_LINE_MAX + HTTP_HEAD_MAX);
    else
        found(&pb, error, "ServiceException", "%s", http_reason(error));
    /* evhttp keeps a CONNECT's connection open whatever the answer says (a tunnel) */
    if (cmd == EVHTTP_REQ_CONNECT)
        evhttp_request_set_on_complete_cb(req, close_when_sent, NULL);
    bad_chunk_size[0] = '\0';
    answer(req, &pb);
}
