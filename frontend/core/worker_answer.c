/*
 * worker_answer: see worker_answer.h.
 */
#include "worker_answer.h"

#include <stdio.h>

#include "batcher.h"
#include "core.h"
#include "handler_reply.h"
#include "log.h"

/* What handler_reply dropped from an answer: one line per 10 s at most (a handler that sets
 * Content-Length does it on every answer), with the count of the answers since the last. */
static void note_dropped(const struct worker *w, const struct job *j,
                         const struct handler_reply_dropped *d)
{
    static int64_t last_us;
    static long since;
    int64_t now = ts_now_us();
    if (last_us && now - last_us < 10000000) {
        since++;
        return;
    }
    char status[64] = "", fr[128] = "";
    if (d->status_from)
        snprintf(status, sizeof(status), " status %d (outside 200..599) became 500;",
                 (int)d->status_from);
    if (d->framing)
        snprintf(fr, sizeof(fr), " %zu framing header(s) dropped ('%s': the server frames it);",
                 d->framing, d->first_framing);
    LOG_REQ(LOG_LEVEL_WARN, j ? j->id : "-",
            "worker %d (model %s): the handler's answer was mended:%s%s %zu malformed header(s) "
            "dropped (%ld more answers mended since the last line)",
            w->id, w->group ? w->group->name : "-", status, fr, d->invalid, since);
    last_us = now;
    since = 0;
}

void worker_answer_prepare(struct worker *w, struct otf_prediction *p, struct job *j)
{
    struct otf_str records = {NULL, 0};
    struct otf_step step;
    int has_step = 0, bad_step = 0;
    size_t n = 0;
    for (size_t k = 0; k < p->n_headers; k++) {
        const struct otf_kv *kv = &p->headers[k];
        if (otf_str_eq(kv->key, OTF_METRICS_KEY))
            records = kv->val;
        else if (otf_str_eq(kv->key, OTF_STEP_KEY))
            bad_step = !(has_step = otf_step_decode(kv->val, &step) == 0);
        else
            p->headers[n++] = *kv;
    }
    p->n_headers = n;
    if (bad_step)
        LOG_WARN("worker %d sent a malformed %s header", w->id, OTF_STEP_KEY);
    if (has_step && w->group) /* the batcher's pipeline depth follows it */
        w->group->step_us = batcher_step_average(w->group->step_us, step.handle_us);
    if ((records.len > 0 || has_step) && w->group && w->group->ops->metrics)
        w->group->ops->metrics(w->group, j, records, has_step ? &step : NULL);
    struct handler_reply_dropped d;
    handler_reply_filter(p, srv->cfg.worker_debug_headers, &d);
    if (d.status_from || d.framing || d.invalid)
        note_dropped(w, j, &d);
}
