/*
 * http_stream: writes a job's frames to its HTTP client; see http_inference.c for the rules.
 */
#include "http_stream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_reply.h"
#include "log.h"
#include "core/model.h"
#include "core/core.h"

#define SSE_KEEPALIVE_S 15
#define STREAM_TIMEOUT_S (24 * 3600)
#define WATCH_READ_MAX (64 * 1024)

static struct evbuffer *conn_output(struct http_call *c)
{
    return bufferevent_get_output(evhttp_connection_get_bufferevent(c->evcon));
}

void http_call_free(struct http_call *c)
{
    if (c->drain_cb && c->evcon)
        evbuffer_remove_cb_entry(conn_output(c), c->drain_cb);
    if (c->stall)
        event_free(c->stall);
    if (c->keepalive)
        event_free(c->keepalive);
    if (c->job)
        job_unref(c->job);
    if (c->arg_free)
        c->arg_free(c->arg);
    free(c);
}

struct http_call *http_call_new(struct evhttp_request *req, const char *rid,
                                enum http_stream_mode mode)
{
    struct http_call *c = xcalloc(1, sizeof(*c));
    c->req = req;
    c->evcon = evhttp_request_get_connection(req);
    size_t n = strnlen(rid, sizeof(c->rid) - 1); /* snprintf's "%s" costs 10x a copy here */
    memcpy(c->rid, rid, n);
    c->rid[n] = '\0';
    if (mode == HTTP_STREAM_SSE) {
        c->sse = 1;
    } else if (mode == HTTP_STREAM_AUTO) {
        const char *acc = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
        c->sse = acc && strcasestr(acc, "text/event-stream") != NULL;
    }
    return c;
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    struct http_call *c = arg;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    LOG_REQ(LOG_LEVEL_INFO, c->rid, "client closed the connection");
    if (c->job)
        job_cancel(c->job);
    /* evhttp detached the unfinished request from the dead connection: it is ours to free; at
     * shutdown (evhttp_free) the request is still attached and evhttp frees it */
    if (!evhttp_request_get_connection(c->req)) {
        if (c->started)
            evhttp_send_reply_end(c->req);
        else
            evhttp_request_free(c->req);
    }
    http_call_free(c);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg);

/* What a client sends while its reply is pending (a pipelined request) is kept up to
 * WATCH_READ_MAX bytes; beyond that the socket is not read (nor its EOF seen) until evhttp reads
 * again for the next request. No evbuffer callback: it would cost every request. */
static void on_watch_read(struct bufferevent *bev, void *arg)
{
    (void)arg;
    if (evbuffer_get_length(bufferevent_get_input(bev)) > WATCH_READ_MAX)
        bufferevent_disable(bev, EV_READ);
}

/* Reads the connection only to notice EOF (evhttp does the same while it writes a reply, with
 * no read callback, which is unbounded); evhttp resets the callbacks at each reply chunk, so
 * send_chunk calls this again. */
static void watch_reads(struct http_call *c)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    bufferevent_data_cb wcb;
    bufferevent_event_cb ecb;
    void *arg;
    bufferevent_getcb(bev, NULL, &wcb, &ecb, &arg);
    bufferevent_setcb(bev, on_watch_read, wcb, ecb, arg);
    /* evhttp has just enabled reading for its reply chunk: keep the bound */
    if (evbuffer_get_length(bufferevent_get_input(bev)) > WATCH_READ_MAX)
        bufferevent_disable(bev, EV_READ);
    else
        bufferevent_enable(bev, EV_READ);
}

static void send_chunk(struct http_call *c, struct evbuffer *b)
{
    evhttp_send_reply_chunk(c->req, b);
    if (c->evcon)
        watch_reads(c);
}

void http_call_watch(struct http_call *c)
{
    if (!c->evcon)
        return;
    evhttp_connection_set_closecb(c->evcon, on_close, c);
    /* evhttp stops reading a connection while its request is being handled, so a client that
     * leaves while its job is queued (or before the first frame) would go unnoticed and the job
     * would still run. Watch for EOF the way evhttp itself does while it writes a reply: no read
     * callback, EV_READ on. The wait in the queue has no idle limit (call_done restores it). */
    watch_reads(c);
    evhttp_connection_set_timeout(c->evcon, STREAM_TIMEOUT_S);
    if (c->sse && !c->whole) {
        struct timeval tv = {SSE_KEEPALIVE_S, 0};
        c->keepalive = event_new(srv->base, -1, 0, on_keepalive, c);
        event_add(c->keepalive, &tv);
        c->last_event_us = ts_now_us();
    }
}

/* The reply is complete (or abandoned): stop watching and free. */
static void call_done(struct http_call *c)
{
    if (c->evcon) {
        evhttp_connection_set_closecb(c->evcon, NULL, NULL);
        /* back to the idle timeout of http_server.c for the next request on the connection */
        evhttp_connection_set_timeout(c->evcon, srv->cfg.default_response_timeout + 10);
    }
    http_call_free(c);
}

/* Every response of a sequence names it, generated ids included; the response of the request
 * that opened the sequence on this instance also says ts_request_sequence_start: true (unless
 * its handler answered that header itself), so that a client-chosen id that started anew here
 * (its instance died) is never a plain 200 like a continuation. */
static void add_seq_header(struct http_call *c)
{
    if (!c->job || !c->job->seq_id)
        return;
    struct evkeyvalq *out = evhttp_request_get_output_headers(c->req);
    const char *name = srv->cfg.ts_header_key_sequence_id;
    if (!evhttp_find_header(out, name))
        evhttp_add_header(out, name, c->job->seq_id);
    name = srv->cfg.ts_header_key_sequence_start;
    if (c->job->seq_new && !evhttp_find_header(out, name))
        evhttp_add_header(out, name, "true");
}

/* A decoded string as a C string: in buf when it fits (no malloc for the usual short header),
 * else a malloc'd copy left in *heap for the caller to free. */
static const char *frame_cstr(struct otf_str s, char *buf, size_t n, char **heap)
{
    size_t len = s.len > 0 ? (size_t)s.len : 0;
    *heap = NULL;
    if (len >= n)
        return *heap = otf_strdup(s);
    if (len)
        memcpy(buf, s.p, len);
    buf[len] = '\0';
    return buf;
}

/* The core let only well-formed headers through, none that frames the answer
 * (core/handler_reply.h). */
static void copy_frame_headers(struct evkeyvalq *out, const struct otf_prediction *p)
{
    for (size_t i = 0; i < p->n_headers; i++) {
        char kb[128], vb[256], *kh, *vh;
        const char *k = frame_cstr(p->headers[i].key, kb, sizeof(kb), &kh);
        const char *v = frame_cstr(p->headers[i].val, vb, sizeof(vb), &vh);
        evhttp_add_header(out, k, v);
        free(kh);
        free(vh);
    }
}

static void sse_write(struct http_call *c, const char *event, const char *data, size_t len)
{
    struct evbuffer *b = evbuffer_new();
    if (event)
        evbuffer_add_printf(b, "event: %s\n", event);
    else if (!c->sse_bare)
        evbuffer_add_printf(b, "id: %llu\n", (unsigned long long)c->events++);
    /* One data: line per line of the payload, as SSE requires; a client joins them with "\n".
     * A line break (\n, \r or \r\n) at the very end still needs its (empty) next line, or a
     * payload of "\n" would arrive as "". */
    const char *s = data, *end = data + len;
    for (;;) {
        const char *nl = s;
        while (nl < end && *nl != '\n' && *nl != '\r')
            nl++;
        evbuffer_add(b, "data: ", 6);
        evbuffer_add(b, s, (size_t)(nl - s));
        evbuffer_add(b, "\n", 1);
        if (nl == end)
            break;
        s = nl + (*nl == '\r' && nl + 1 < end && nl[1] == '\n' ? 2 : 1);
    }
    evbuffer_add(b, "\n", 1);
    send_chunk(c, b);
    evbuffer_free(b);
    c->last_event_us = ts_now_us();
}

static void start_stream(struct http_call *c, const struct otf_prediction *p);

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct http_call *c = arg;
    if (!c->started) {
        /* 15 s and no frame yet (a long queue, a slow first token): start the stream now, so
         * that the client and proxies see it alive; errors then come as `event: error` */
        struct otf_prediction q;
        memset(&q, 0, sizeof(q));
        q.status = 200;
        start_stream(c, &q);
        c->last_event_us = 0;
    }
    /* a one-shot timer, re-armed for the rest of the quiet period when events went out
     * meanwhile: the comment comes 15 s after the last event, and events cost no timer work */
    int64_t left = SSE_KEEPALIVE_S * 1000000LL - (ts_now_us() - c->last_event_us);
    if (left <= 0) {
        struct evbuffer *b = evbuffer_new();
        evbuffer_add_printf(b, ": keep-alive\n\n");
        send_chunk(c, b);
        evbuffer_free(b);
        c->last_event_us = ts_now_us();
        left = SSE_KEEPALIVE_S * 1000000LL;
    }
    struct timeval tv = {(time_t)(left / 1000000), (suseconds_t)(left % 1000000)};
    event_add(c->keepalive, &tv);
}

static void start_stream(struct http_call *c, const struct otf_prediction *p)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(c->req);
    http_add_std_headers(c->req, c->rid);
    int status = p->status > 0 ? p->status : 200;
    if (c->sse) {
        evhttp_remove_header(out, "Cache-Control");
        evhttp_add_header(out, "Content-Type", "text/event-stream");
        evhttp_add_header(out, "Cache-Control", "no-cache");
        evhttp_add_header(out, "X-Accel-Buffering", "no");
        struct timeval tv = {SSE_KEEPALIVE_S, 0};
        if (!c->keepalive)
            c->keepalive = event_new(srv->base, -1, 0, on_keepalive, c);
        event_add(c->keepalive, &tv);
        c->last_event_us = ts_now_us();
    } else {
        char *ct = otf_strdup(p->ctype);
        if (*ct)
            evhttp_add_header(out, "Content-Type", ct);
        free(ct);
    }
    copy_frame_headers(out, p);
    add_seq_header(c);
    /* the gap between chunks may exceed the idle timeout: a stream sets its own pace */
    if (c->evcon) {
        evhttp_connection_set_timeout(c->evcon, STREAM_TIMEOUT_S);
        /* Each chunk is a small write while the previous one may be unacknowledged: with Nagle
         * on, it would wait for the client's delayed ACK (up to 40 ms) */
        int one = 1;
        evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(c->evcon));
        if (fd >= 0)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    http_count_status(status);
    evhttp_send_reply_start(c->req, status, http_reason(status));
    c->started = 1;
}

static void write_chunk(struct http_call *c, const char *data, size_t len)
{
    if (c->sse && !c->sse_raw) {
        sse_write(c, NULL, data, len);
        return;
    }
    if (len == 0)
        return;
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, data, len);
    send_chunk(c, b);
    evbuffer_free(b);
}

/* Backpressure. A client that reads slower than its stream is produced would make the
 * connection's output grow without bound: past stream_buffer_size its job is paused on the
 * worker (only that request: the others in the worker's batch go on), and resumed once the
 * client has read half of it. A client that reads nothing for stream_stall_timeout is cut off;
 * its job is then cancelled like any client that goes away. */
static void on_stall(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct http_call *c = arg;
    LOG_REQ(LOG_LEVEL_WARN, c->rid,
            "client read nothing of its stream for %d s (stream_stall_timeout, %zu bytes "
            "unread): closing the connection",
            srv->cfg.stream_stall_timeout, evbuffer_get_length(conn_output(c)));
    /* the connection fails as if the client had left: on_close cancels the job and frees */
    evutil_socket_t s = bufferevent_getfd(evhttp_connection_get_bufferevent(c->evcon));
    if (s >= 0)
        shutdown(s, SHUT_RDWR);
}

static void arm_stall(struct http_call *c)
{
    struct timeval tv = {srv->cfg.stream_stall_timeout, 0};
    if (!c->stall)
        c->stall = evtimer_new(srv->base, on_stall, c);
    evtimer_add(c->stall, &tv);
}

static void on_drain(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_call *c = arg;
    if (!c->paused || info->n_deleted == 0)
        return;
    if (evbuffer_get_length(b) > (size_t)srv->cfg.stream_buffer_size / 2) {
        arm_stall(c); /* it reads, slowly: not a stall */
        return;
    }
    c->paused = 0;
    evtimer_del(c->stall);
    if (c->job)
        job_pause(c->job, 0);
}

static void check_backpressure(struct http_call *c)
{
    if (c->paused || !c->evcon || !c->job)
        return;
    struct evbuffer *out = conn_output(c);
    if (evbuffer_get_length(out) <= (size_t)srv->cfg.stream_buffer_size)
        return;
    c->paused = 1;
    if (!c->drain_cb)
        c->drain_cb = evbuffer_add_cb(out, on_drain, c);
    arm_stall(c);
    job_pause(c->job, 1);
}

/* An `event: error` with the error's JSON, or, for sse_raw, data that is already whole events. */
static void sse_error(struct http_call *c, const char *data, size_t len)
{
    if (c->sse_raw) {
        write_chunk(c, data, len);
        return;
    }
    while (len && data[len - 1] == '\n')
        len--;
    sse_write(c, "error", data, len);
}

/* The reply is complete; a job that goes on (end_now) is cancelled first. */
static void reply_done(struct http_call *c, int final)
{
    if (!final && c->job)
        job_cancel(c->job);
    call_done(c);
}

static void on_frame(struct job *j, const struct otf_prediction *p, int final)
{
    struct http_call *c = j->sink_arg;
    size_t len = p->body.len > 0 ? (size_t)p->body.len : 0;
    char *tx = c->transform ? c->transform(c, p, final, &len) : NULL;
    const char *data = tx ? tx : p->body.p;
    int last = final || c->end_now;
    int status = c->status ? c->status : p->status > 0 ? p->status : 200;

    if (c->whole && !last) {
        free(tx);
        return;
    }
    /* a handler error (final frame with an error status) to an SSE client: a plain HTTP error
     * before the stream started, an `event: error` after, never a data event */
    if (c->sse && last && status >= 400) {
        if (!c->started) {
            http_send(c->req, c->rid, status, "application/json", data, len);
        } else {
            sse_error(c, data, len);
            evhttp_send_reply_end(c->req);
        }
        free(tx);
        reply_done(c, final);
        return;
    }
    if (!c->started && last) {
        struct evkeyvalq *out = evhttp_request_get_output_headers(c->req);
        copy_frame_headers(out, p);
        add_seq_header(c);
        char *ct = c->ctype ? xstrdup(c->ctype) : otf_strdup(p->ctype);
        if (c->sse) {
            /* an SSE client asked for a stream: a whole answer is one event */
            struct otf_prediction q = *p;
            q.ctype = otf_s("");
            start_stream(c, &q);
            if (len)
                write_chunk(c, data, len);
            evhttp_send_reply_end(c->req);
        } else {
            http_send(c->req, c->rid, status, ct, data, len);
        }
        free(ct);
        free(tx);
        reply_done(c, final);
        return;
    }
    if (!c->started)
        start_stream(c, p);
    if (len || (c->sse && !c->sse_raw))
        if (len || !last)
            write_chunk(c, data, len);
    free(tx);
    if (last) {
        evhttp_send_reply_end(c->req);
        reply_done(c, final);
    } else {
        check_backpressure(c);
    }
}

static void on_error(struct job *j, int status, const char *type, const char *msg)
{
    struct http_call *c = j->sink_arg;
    LOG_REQ(LOG_LEVEL_WARN, c->rid, "request failed: %d %s", status, msg);
    char *body =
        c->error_body ? c->error_body(c, status, type, msg) : http_error_json(status, type, msg);
    if (!c->started) {
        add_seq_header(c);
        http_send(c->req, c->rid, status, "application/json", body, strlen(body));
        free(body);
        call_done(c);
        return;
    }
    if (c->sse) {
        sse_error(c, body, strlen(body));
        evhttp_send_reply_end(c->req);
        free(body);
        call_done(c);
        return;
    }
    /* plain chunks: the status already went out, so the error JSON is the last chunk */
    write_chunk(c, body, strlen(body));
    free(body);
    evhttp_send_reply_end(c->req);
    call_done(c);
}

const struct job_sink http_call_sink = {on_frame, on_error};

void http_call_reject(struct http_call *c, int status, const char *type, const char *msg)
{
    char *body =
        c->error_body ? c->error_body(c, status, type, msg) : http_error_json(status, type, msg);
    add_seq_header(c);
    http_send(c->req, c->rid, status, "application/json", body, strlen(body));
    free(body);
    http_call_free(c);
}
