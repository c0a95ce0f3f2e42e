/*
 * ctx_park: the output of a paused request, held in the worker (ctx.h).
 *
 * The frontend pauses a request ('P') when its client reads slower than its stream and the
 * frontend holds stream_buffer_size of it; it resumes it ('R') once the client has read half.
 * Until then, whatever the handler answers for that request (an intermediate response in the
 * middle of a handle() call, or the step's final one) is not written to the socket: it is
 * encoded here as whole response frames of one prediction each, in order, and moved into the
 * output when the request is resumed. So the frontend never holds much more than
 * stream_buffer_size per stream, whichever handler writes, and the other requests of the
 * socket go on. What a request may park is bounded (park_max: stream_buffer_size again); past
 * that the request alone is cancelled with a 429 that names the cause, and its handler learns
 * it as a cancel (ts_send_intermediate_response returns -ECANCELED).
 *
 * Single-threaded, like ctx. The entries are owned by the ctx; an entry outlives its request
 * when the request finished while paused (its final frame waits here).
 */
#include "ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct ctx_parked {
    struct ctx_parked *next;
    char *id;
    struct buf frames; /* whole response frames, one prediction each, in order */
    int streamed;      /* one of them was an intermediate response */
};

static struct ctx_parked **find(struct ts_ctx *c, const char *id)
{
    struct ctx_parked **pp = &c->parked;
    while (*pp && strcmp((*pp)->id, id))
        pp = &(*pp)->next;
    return pp;
}

static void entry_free(struct ctx_parked *p)
{
    buf_free(&p->frames);
    free(p->id);
    free(p);
}

int ctx_park_has(struct ts_ctx *c, const char *id)
{
    return *find(c, id) != NULL;
}

struct buf *ctx_park_buf(struct ts_ctx *c, const char *id, int streamed)
{
    struct ctx_parked **pp = find(c, id);
    if (!*pp) {
        *pp = xcalloc(1, sizeof(**pp));
        (*pp)->id = xstrdup(id);
        buf_init(&(*pp)->frames);
    }
    (*pp)->streamed |= streamed;
    return &(*pp)->frames;
}

size_t ctx_park_bytes(struct ts_ctx *c, const char *id)
{
    struct ctx_parked *p = *find(c, id);
    return p ? p->frames.len : 0;
}

void ctx_park_drop(struct ts_ctx *c, const char *id)
{
    struct ctx_parked **pp = find(c, id), *p = *pp;
    if (!p)
        return;
    *pp = p->next;
    entry_free(p);
}

int ctx_unpark(struct ts_ctx *c, const char *id)
{
    struct ctx_parked **pp = find(c, id), *p = *pp;
    if (!p)
        return 0;
    *pp = p->next;
    ctx_close_frame(c);
    buf_put(&c->out, p->frames.data, p->frames.len);
    /* one record for ctx_fail_uncommitted: should the flush's commit fail, the request gets
     * one 507 for these frames, as for any other it has in out */
    buf_put_u8(&c->unsent, p->streamed);
    buf_put(&c->unsent, p->id, strlen(p->id) + 1);
    LOG_REQ(LOG_LEVEL_DEBUG, id, "resumed: %zu bytes held for it go out", p->frames.len);
    entry_free(p);
    return 1;
}

void ctx_park_free_all(struct ts_ctx *c)
{
    while (c->parked) {
        struct ctx_parked *p = c->parked;
        c->parked = p->next;
        entry_free(p);
    }
}
