/*
 * ctx_input: a request's streamed input (handler.h, ts_input_next) and the wake-up descriptor of
 * handlers whose work goes on outside handle() (ts_set_wake_fd).
 *
 * The frontend sends the later messages of a client's input stream as 'D' frames and its end as
 * an 'E' frame (otf.h, OTF_INPUT_STREAM). The loop (worker.c) appends each to its request in
 * arrival order and makes the request due; the handler takes them one at a time. A message taken
 * stays allocated until the next one is taken or the request ends, so the pointers handed out
 * stay valid as handler.h promises. Worker thread only.
 */
#include "ctx.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

void ctx_input_init(struct wreq *r)
{
    for (size_t i = 0; i < r->n_headers; i++)
        if (!strcmp(r->headers[i].key, OTF_INPUT_STREAM) && !strcmp(r->headers[i].val, "true"))
            r->input_open = 1;
}

void ctx_input_add(struct wreq *r, struct otf_str ctype, struct otf_str body)
{
    if (!r->input_open) {
        LOG_REQ(LOG_LEVEL_WARN, r->id, "an input message after the end of its input: dropped");
        return;
    }
    size_t clen = ctype.len > 0 ? (size_t)ctype.len : 0;
    size_t blen = body.len > 0 ? (size_t)body.len : 0;
    struct winput *m = xmalloc(sizeof(*m) + clen + 1 + blen + 1);
    m->next = NULL;
    m->ctype = (char *)(m + 1);
    memcpy(m->ctype, clen ? ctype.p : "", clen);
    m->ctype[clen] = '\0';
    m->body = m->ctype + clen + 1;
    memcpy(m->body, blen ? body.p : "", blen);
    m->body[blen] = '\0';
    m->len = blen;
    if (r->in_tail)
        r->in_tail->next = m;
    else
        r->in_head = m;
    r->in_tail = m;
}

void ctx_input_end(struct wreq *r)
{
    r->input_open = 0;
}

void ctx_input_free(struct wreq *r)
{
    for (struct winput *m = r->in_head, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    free(r->in_taken);
    r->in_head = r->in_tail = r->in_taken = NULL;
}

int ts_input_next(struct ts_ctx *ctx, size_t idx, const void **body, size_t *len,
                  const char **ctype)
{
    struct wreq *r = ctx_req_at(ctx, idx);
    if (!r)
        return -1;
    struct winput *m = r->in_head;
    if (!m)
        return r->input_open ? 0 : -1;
    r->in_head = m->next;
    if (!r->in_head)
        r->in_tail = NULL;
    free(r->in_taken);
    r->in_taken = m;
    if (body)
        *body = m->body;
    if (len)
        *len = m->len;
    if (ctype)
        *ctype = m->ctype;
    return 1;
}

void ts_set_wake_fd(struct ts_ctx *ctx, int fd)
{
    ctx->wake_fd = fd < 0 ? -1 : fd;
}
