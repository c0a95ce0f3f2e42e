/*
 * job: request data, references and the three ways a job ends (a final frame, a failure, or a
 * cancel by its transport). The queue/worker side and the transport each hold a reference; see
 * job.h for who calls what.
 */
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

struct job *job_new(const char *id, const struct job_sink *sink, void *sink_arg)
{
    struct job *j = xcalloc(1, sizeof(*j));
    j->refs = 1;
    j->state = JOB_NEW;
    /* The id the worker matches frames by is always ours: two clients may send the same
     * x-request-id or OIP id at once. Theirs travels as the x-request-id header. */
    ts_uuid(j->id);
    if (id && *id) {
        snprintf(j->rid, sizeof(j->rid), "%s", id);
        job_add_header(j, "x-request-id", id, strlen(id));
    } else {
        strcpy(j->rid, j->id);
    }
    j->sink = sink;
    j->sink_arg = sink_arg;
    j->created_us = ts_now_us();
    return j;
}

void job_ref(struct job *j)
{
    j->refs++;
}

void job_unref(struct job *j)
{
    if (--j->refs > 0)
        return;
    for (size_t i = 0; i < j->n_headers; i++)
        free(j->headers[i].key); /* the value shares its allocation */
    for (size_t i = 0; i < j->n_params; i++) {
        free(j->params[i].name); /* the content type shares its allocation */
        free(j->params[i].value);
    }
    free(j->headers);
    free(j->params);
    free(j->seq_id);
    struct job_input *in;
    while ((in = job_input_take(j))) {
        free(in->body);
        free(in);
    }
    free(j);
}

void job_add_header(struct job *j, const char *key, const char *val, size_t vlen)
{
    if (j->n_headers == j->cap_headers) {
        j->cap_headers = j->cap_headers ? j->cap_headers * 2 : 16;
        j->headers = xrealloc(j->headers, j->cap_headers * sizeof(*j->headers));
    }
    /* key and value in one allocation: a request copies a dozen headers */
    struct job_kv *kv = &j->headers[j->n_headers++];
    size_t klen = strlen(key);
    kv->key = xmalloc(klen + 1 + vlen + 1);
    memcpy(kv->key, key, klen + 1);
    kv->val = kv->key + klen + 1;
    memcpy(kv->val, val, vlen);
    kv->val[vlen] = '\0';
    kv->vlen = vlen;
}

void job_add_param_owned(struct job *j, const char *name, const char *ctype, char *value,
                         size_t vlen)
{
    if (j->n_params == j->cap_params) {
        j->cap_params = j->cap_params ? j->cap_params * 2 : 4;
        j->params = xrealloc(j->params, j->cap_params * sizeof(*j->params));
    }
    struct job_param *p = &j->params[j->n_params++];
    if (!ctype)
        ctype = "";
    size_t nlen = strlen(name), clen = strlen(ctype);
    p->name = xmalloc(nlen + 1 + clen + 1); /* name and content type in one allocation */
    memcpy(p->name, name, nlen + 1);
    p->ctype = p->name + nlen + 1;
    memcpy(p->ctype, ctype, clen + 1);
    p->value = value;
    p->vlen = vlen;
}

void job_open_input(struct job *j)
{
    j->input_stream = j->input_open = 1;
    job_add_header(j, OTF_INPUT_STREAM, "true", 4);
}

static void input_ready(struct job *j)
{
    if (j->state == JOB_RUNNING && j->owner && j->owner->input)
        j->owner->input(j);
}

void job_feed(struct job *j, const char *ctype, char *body, size_t len)
{
    if (!j->input_open || j->state == JOB_DONE) {
        free(body);
        return;
    }
    size_t clen = strlen(ctype);
    struct job_input *in = xmalloc(sizeof(*in) + clen + 1);
    in->next = NULL;
    in->ctype = (char *)(in + 1);
    memcpy(in->ctype, ctype, clen + 1);
    in->body = body;
    in->len = len;
    if (j->in_tail)
        j->in_tail->next = in;
    else
        j->in_head = in;
    j->in_tail = in;
    input_ready(j);
}

void job_feed_end(struct job *j)
{
    if (!j->input_open)
        return;
    j->input_open = 0;
    input_ready(j);
}

struct job_input *job_input_take(struct job *j)
{
    struct job_input *in = j->in_head;
    if (in) {
        j->in_head = in->next;
        if (!j->in_head)
            j->in_tail = NULL;
    }
    return in;
}

const char *job_header(const struct job *j, const char *key)
{
    const char *found = NULL;
    for (size_t i = 0; i < j->n_headers; i++)
        if (!strcasecmp(j->headers[i].key, key))
            found = j->headers[i].val;
    return found;
}

void job_to_otf(const struct job *j, struct job_otf *o)
{
    struct otf_request *r = &o->r;
    struct otf_kv *h = few_or_alloc(o->few_h, JOB_OTF_FEW_HEADERS, j->n_headers, sizeof(*h));
    struct otf_param *p = few_or_alloc(o->few_p, JOB_OTF_FEW_PARAMS, j->n_params, sizeof(*p));
    for (size_t i = 0; i < j->n_headers; i++) {
        h[i].key = otf_s(j->headers[i].key);
        h[i].val = otf_sn(j->headers[i].val, j->headers[i].vlen);
    }
    for (size_t i = 0; i < j->n_params; i++) {
        p[i].name = otf_s(j->params[i].name);
        p[i].ctype = otf_s(j->params[i].ctype);
        p[i].value = otf_sn(j->params[i].value, j->params[i].vlen);
    }
    r->id = otf_s(j->id);
    r->headers = h;
    r->n_headers = j->n_headers;
    r->params = p;
    r->n_params = j->n_params;
}

void job_otf_done(struct job_otf *o)
{
    free_unless_few(o->r.headers, o->few_h);
    free_unless_few(o->r.params, o->few_p);
}

/* Ends the job on the queue/worker side and drops that side's reference. The caller has already
 * unlinked it from the queue or the worker. */
static void job_finish(struct job *j)
{
    int was_running = j->state == JOB_RUNNING;
    if (j->owner && j->owner->ended)
        j->owner->ended(j, was_running);
    j->state = JOB_DONE;
    j->worker = NULL;
    job_unref(j);
}

void job_deliver_frame(struct job *j, const struct otf_prediction *p, int final)
{
    j->frames++;
    if (j->owner && j->owner->frame)
        j->owner->frame(j, p);
    job_ref(j); /* the sink may drop the transport's reference */
    if (j->sink)
        j->sink->on_frame(j, p, final);
    if (final)
        job_finish(j);
    job_unref(j);
}

void job_fail(struct job *j, int status, const char *type, const char *msg)
{
    job_ref(j);
    if (j->sink)
        j->sink->on_error(j, status, type, msg);
    job_finish(j);
    job_unref(j);
}

void job_cancel(struct job *j)
{
    j->sink = NULL;
    j->sink_arg = NULL;
    if ((j->state == JOB_QUEUED || j->state == JOB_RUNNING) && j->owner) {
        j->owner->withdraw(j);
        job_finish(j);
    }
}

void job_pause(struct job *j, int paused)
{
    if (j->state == JOB_RUNNING && j->owner && j->owner->pause && j->paused != !!paused)
        j->owner->pause(j, !!paused);
}
