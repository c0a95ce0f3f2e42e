/*
 * otf: encoder and decoder for the worker frame protocol (see otf.h for the layout).
 *
 * The protocol has no frame length prefix, so a decoder cannot know a frame is complete before
 * it has walked it. Decoding therefore restarts from the frame's first byte whenever more bytes
 * arrive (as TorchServe's Netty decoder does from its mark). Frames are small relative to the
 * socket buffer in practice, so the re-walk costs little; every length is checked against
 * max_field before anything is trusted.
 */
#include "otf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *otf_strdup(struct otf_str s)
{
    if (s.len <= 0)
        return xstrdup("");
    return xstrndup(s.p, (size_t)s.len);
}

const struct otf_kv *otf_find_kv(const struct otf_kv *kv, size_t n, const char *key)
{
    const struct otf_kv *found = NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (kv[i].key.len >= 0 && (size_t)kv[i].key.len == klen &&
            (klen == 0 || memcmp(kv[i].key.p, key, klen) == 0))
            found = &kv[i];
    return found;
}

/* ---------------------------------------------------------------- encoding */

void otf_put_str(struct buf *b, struct otf_str s)
{
    if (s.len <= 0 || !s.p) {
        buf_put_i32(b, 0);
        return;
    }
    buf_put_i32(b, s.len);
    buf_put(b, s.p, (size_t)s.len);
}

void otf_encode_load(struct buf *b, const struct otf_load *l)
{
    buf_put_u8(b, OTF_CMD_LOAD);
    otf_put_str(b, l->model_name);
    otf_put_str(b, l->model_path);
    buf_put_i32(b, l->batch_size > 0 ? l->batch_size : 1);
    otf_put_str(b, l->handler);
    buf_put_i32(b, l->gpu_id);
    otf_put_str(b, l->envelope);
    buf_put_u8(b, l->limit_max_image_pixels);
}

void otf_encode_infer_begin(struct buf *b)
{
    buf_put_u8(b, OTF_CMD_INFER);
}

/* The hot encoders (a request, a prediction) size their bytes first and write them with one
 * reservation: a call per field to buf_put costs more than the copying. */
static size_t str_size(struct otf_str s)
{
    return 4 + (s.len > 0 && s.p ? (size_t)s.len : 0);
}

static uint8_t *raw_i32(uint8_t *q, int32_t v)
{
    uint32_t u = (uint32_t)v;
    q[0] = (uint8_t)(u >> 24);
    q[1] = (uint8_t)(u >> 16);
    q[2] = (uint8_t)(u >> 8);
    q[3] = (uint8_t)u;
    return q + 4;
}

static uint8_t *raw_str(uint8_t *q, struct otf_str s)
{
    if (s.len <= 0 || !s.p)
        return raw_i32(q, 0);
    q = raw_i32(q, s.len);
    memcpy(q, s.p, (size_t)s.len);
    return q + s.len;
}

static size_t kvs_size(const struct otf_kv *kv, size_t n)
{
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        size += str_size(kv[i].key) + str_size(kv[i].val);
    return size;
}

static uint8_t *raw_kvs(uint8_t *q, const struct otf_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        q = raw_str(q, kv[i].key);
        q = raw_str(q, kv[i].val);
    }
    return q;
}

/* Room for size more bytes in b: where they go. The caller writes exactly size bytes and then
 * calls raw_done. */
static uint8_t *raw_begin(struct buf *b, size_t size)
{
    buf_reserve(b, size);
    return b->data + b->len;
}

static void raw_done(struct buf *b, const uint8_t *end)
{
    b->len = (size_t)(end - b->data);
    b->data[b->len] = '\0';
}

void otf_encode_request(struct buf *b, const struct otf_request *r)
{
    size_t size = str_size(r->id) + kvs_size(r->headers, r->n_headers) + 8;
    for (size_t i = 0; i < r->n_params; i++)
        size += str_size(r->params[i].name) + str_size(r->params[i].ctype) +
                str_size(r->params[i].value);
    uint8_t *q = raw_begin(b, size);
    q = raw_str(q, r->id);
    q = raw_kvs(q, r->headers, r->n_headers);
    q = raw_i32(q, -1);
    for (size_t i = 0; i < r->n_params; i++) {
        q = raw_str(q, r->params[i].name);
        q = raw_str(q, r->params[i].ctype);
        q = raw_str(q, r->params[i].value);
    }
    q = raw_i32(q, -1);
    raw_done(b, q);
}

void otf_encode_list_end(struct buf *b)
{
    buf_put_i32(b, -1);
}

static void encode_ids(struct buf *b, char cmd, const struct otf_str *ids, size_t n)
{
    buf_put_u8(b, (uint8_t)cmd);
    for (size_t i = 0; i < n; i++)
        otf_put_str(b, ids[i]);
    buf_put_i32(b, -1);
}

void otf_encode_cancel(struct buf *b, const struct otf_str *ids, size_t n)
{
    encode_ids(b, OTF_CMD_CANCEL, ids, n);
}

void otf_encode_pause(struct buf *b, const struct otf_str *ids, size_t n, int paused)
{
    encode_ids(b, paused ? OTF_CMD_PAUSE : OTF_CMD_RESUME, ids, n);
}

void otf_encode_seq_event(struct buf *b, struct otf_str seq_id, int32_t event)
{
    buf_put_u8(b, OTF_CMD_SEQ_EVENT);
    otf_put_str(b, seq_id);
    buf_put_i32(b, event);
    buf_put_i32(b, -1);
}

void otf_encode_input(struct buf *b, struct otf_str id, struct otf_str ctype, struct otf_str body)
{
    buf_put_u8(b, OTF_CMD_INPUT);
    otf_put_str(b, id);
    otf_put_str(b, ctype);
    otf_put_str(b, body);
}

void otf_encode_input_end(struct buf *b, const struct otf_str *ids, size_t n)
{
    encode_ids(b, OTF_CMD_INPUT_END, ids, n);
}

void otf_encode_response_begin(struct buf *b, int32_t code, struct otf_str msg)
{
    buf_put_i32(b, code);
    otf_put_str(b, msg);
}

void otf_encode_prediction(struct buf *b, const struct otf_prediction *p)
{
    size_t size = str_size(p->id) + str_size(p->ctype) + 4 + str_size(p->phrase) + 4 +
                  kvs_size(p->headers, p->n_headers) + str_size(p->body);
    uint8_t *q = raw_begin(b, size);
    q = raw_str(q, p->id);
    q = raw_str(q, p->ctype);
    q = raw_i32(q, p->status);
    q = raw_str(q, p->phrase);
    q = raw_i32(q, (int32_t)p->n_headers);
    q = raw_kvs(q, p->headers, p->n_headers);
    q = raw_str(q, p->body);
    raw_done(b, q);
}

/* ---------------------------------------------------------------- decoding */

struct rd {
    const uint8_t *p;
    size_t len;
    size_t off;
    size_t max;
};

static int rd_i32(struct rd *r, int32_t *v)
{
    if (r->len - r->off < 4)
        return TS_E_INCOMPLETE;
    const uint8_t *q = r->p + r->off;
    *v = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) |
                   (uint32_t)q[3]);
    r->off += 4;
    return 0;
}

static int rd_u8(struct rd *r, uint8_t *v)
{
    if (r->len - r->off < 1)
        return TS_E_INCOMPLETE;
    *v = r->p[r->off++];
    return 0;
}

/* A string whose length was already read. */
static int rd_body(struct rd *r, int32_t n, struct otf_str *s)
{
    if (n < 0)
        return TS_E_PROTOCOL;
    if ((size_t)n > r->max)
        return TS_E_TOO_LARGE;
    if (r->len - r->off < (size_t)n)
        return TS_E_INCOMPLETE;
    s->p = (const char *)r->p + r->off;
    s->len = n;
    r->off += (size_t)n;
    return 0;
}

static int rd_str(struct rd *r, struct otf_str *s)
{
    int32_t n;
    int rc = rd_i32(r, &n);
    if (rc)
        return rc;
    return rd_body(r, n, s);
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* Grows a malloc'd array by one element; *cap tracks capacity. */
static void *grow(void *arr, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    *cap = *cap ? *cap * 2 : 8;
    return xrealloc(arr, *cap * elem);
}

/* Reads {k v}* up to a -1 (list_end) or exactly `count` pairs when count >= 0. */
static int rd_kvs(struct rd *r, long count, struct otf_kv **out, size_t *n_out)
{
    size_t cap = 0, n = 0;
    struct otf_kv *kv = NULL;
    int rc = 0;
    for (long i = 0; count < 0 || i < count; i++) {
        int32_t klen;
        if ((rc = rd_i32(r, &klen)))
            break;
        if (count < 0 && klen == -1)
            break;
        kv = grow(kv, n, &cap, sizeof(*kv));
        if ((rc = rd_body(r, klen, &kv[n].key)) || (rc = rd_str(r, &kv[n].val)))
            break;
        n++;
        if (n > 100000) {
            rc = TS_E_TOO_LARGE;
            break;
        }
    }
    *out = kv;
    *n_out = n;
    return rc;
}

void otf_response_free(struct otf_response *r)
{
    for (size_t i = 0; i < r->n_preds; i++)
        free(r->preds[i].headers);
    free(r->preds);
    memset(r, 0, sizeof(*r));
}

static int decode_response(struct rd *r, struct otf_response *out)
{
    size_t cap = 0;
    TRY(rd_i32(r, &out->code));
    TRY(rd_str(r, &out->msg));
    for (;;) {
        int32_t idlen;
        TRY(rd_i32(r, &idlen));
        if (idlen == -1)
            return 0;
        out->preds = grow(out->preds, out->n_preds, &cap, sizeof(*out->preds));
        struct otf_prediction *p = &out->preds[out->n_preds];
        memset(p, 0, sizeof(*p));
        out->n_preds++;
        TRY(rd_body(r, idlen, &p->id));
        TRY(rd_str(r, &p->ctype));
        TRY(rd_i32(r, &p->status));
        TRY(rd_str(r, &p->phrase));
        int32_t nh;
        TRY(rd_i32(r, &nh));
        if (nh < 0 || nh > 100000)
            return TS_E_PROTOCOL;
        TRY(rd_kvs(r, nh, &p->headers, &p->n_headers));
        TRY(rd_str(r, &p->body));
    }
}

long otf_decode_response(const uint8_t *p, size_t len, size_t max_field, struct otf_response *out)
{
    struct rd r = {p, len, 0, max_field};
    memset(out, 0, sizeof(*out));
    int rc = decode_response(&r, out);
    if (rc) {
        otf_response_free(out);
        return rc;
    }
    return (long)r.off;
}

void otf_command_free(struct otf_command *c)
{
    for (size_t i = 0; i < c->n_reqs; i++) {
        free(c->reqs[i].headers);
        free(c->reqs[i].params);
    }
    free(c->reqs);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

static int decode_params(struct rd *r, struct otf_request *q)
{
    size_t cap = 0;
    for (;;) {
        int32_t nlen;
        TRY(rd_i32(r, &nlen));
        if (nlen == -1)
            return 0;
        q->params = grow(q->params, q->n_params, &cap, sizeof(*q->params));
        struct otf_param *pa = &q->params[q->n_params++];
        TRY(rd_body(r, nlen, &pa->name));
        TRY(rd_str(r, &pa->ctype));
        TRY(rd_str(r, &pa->value));
    }
}

static int decode_command(struct rd *r, struct otf_command *c)
{
    uint8_t cmd;
    TRY(rd_u8(r, &cmd));
    c->cmd = (char)cmd;
    switch (cmd) {
    case OTF_CMD_LOAD: {
        struct otf_load *l = &c->load;
        TRY(rd_str(r, &l->model_name));
        TRY(rd_str(r, &l->model_path));
        TRY(rd_i32(r, &l->batch_size));
        TRY(rd_str(r, &l->handler));
        TRY(rd_i32(r, &l->gpu_id));
        TRY(rd_str(r, &l->envelope));
        TRY(rd_u8(r, &l->limit_max_image_pixels));
        return 0;
    }
    case OTF_CMD_INFER: {
        size_t cap = 0;
        for (;;) {
            int32_t idlen;
            TRY(rd_i32(r, &idlen));
            if (idlen == -1)
                return 0;
            c->reqs = grow(c->reqs, c->n_reqs, &cap, sizeof(*c->reqs));
            struct otf_request *q = &c->reqs[c->n_reqs++];
            memset(q, 0, sizeof(*q));
            TRY(rd_body(r, idlen, &q->id));
            TRY(rd_kvs(r, -1, &q->headers, &q->n_headers));
            TRY(decode_params(r, q));
        }
    }
    case OTF_CMD_INPUT:
        TRY(rd_str(r, &c->input_id));
        TRY(rd_str(r, &c->input_ctype));
        TRY(rd_str(r, &c->input_body));
        return 0;
    case OTF_CMD_CANCEL:
    case OTF_CMD_PAUSE:
    case OTF_CMD_RESUME:
    case OTF_CMD_INPUT_END: {
        size_t cap = 0;
        for (;;) {
            int32_t idlen;
            TRY(rd_i32(r, &idlen));
            if (idlen == -1)
                return 0;
            c->ids = grow(c->ids, c->n_ids, &cap, sizeof(*c->ids));
            TRY(rd_body(r, idlen, &c->ids[c->n_ids++]));
        }
    }
    case OTF_CMD_SEQ_EVENT: {
        int32_t end;
        TRY(rd_str(r, &c->seq_id));
        TRY(rd_i32(r, &c->seq_event));
        TRY(rd_i32(r, &end));
        return end == -1 ? 0 : TS_E_PROTOCOL;
    }
    default:
        return TS_E_PROTOCOL;
    }
}

long otf_decode_command(const uint8_t *p, size_t len, size_t max_field, struct otf_command *out)
{
    struct rd r = {p, len, 0, max_field};
    memset(out, 0, sizeof(*out));
    int rc = decode_command(&r, out);
    if (rc) {
        otf_command_free(out);
        return rc;
    }
    return (long)r.off;
}

/* ---------------------------------------------------------------- worker metrics */

/* Byte classes of metric names, dimension names and units (otf.h): a name's first byte, a
 * name's later bytes, a unit's; ':' is a metric name's only (Prometheus' recording rules), never a
 * dimension name's or a unit's. */
enum { C_FIRST = 1, C_NAME = 2, C_UNIT = 4 };
static const unsigned char metric_cls[256] = {
    ['a' ... 'z'] = C_FIRST | C_NAME | C_UNIT,
    ['A' ... 'Z'] = C_FIRST | C_NAME | C_UNIT,
    ['_'] = C_FIRST | C_NAME | C_UNIT,
    [':'] = C_FIRST | C_NAME,
    ['0' ... '9'] = C_NAME | C_UNIT,
    ['%'] = C_UNIT,
    ['/'] = C_UNIT,
    ['.'] = C_UNIT,
    ['-'] = C_UNIT,
};

static int is(char c, int cls)
{
    return (metric_cls[(unsigned char)c] & cls) != 0;
}

static int all_of(const char *p, size_t n, int cls)
{
    for (size_t i = 0; i < n; i++)
        if (!is(p[i], cls))
            return 0;
    return 1;
}

int otf_metric_name_ok(const char *p, size_t n)
{
    return n > 0 && is(p[0], C_FIRST) && all_of(p, n, C_NAME);
}

int otf_metric_dim_ok(const char *p, size_t n)
{
    return otf_metric_name_ok(p, n) && !memchr(p, ':', n);
}

int otf_metric_unit_ok(const char *p, size_t n)
{
    return all_of(p, n, C_UNIT);
}

static void put_be64(uint8_t *q, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        q[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *q)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | q[i];
    return v;
}

int otf_metric_encode(struct buf *b, char kind, const char *name, const char *unit, double value)
{
    if ((kind != 'c' && kind != 'g' && kind != 'h') || !name || !*name || !isfinite(value))
        return -EINVAL;
    /* the longest record: 3 bytes of head, the name, the unit, 8 bytes of value */
    uint8_t rec[3 + OTF_METRIC_NAME_MAX + OTF_METRIC_UNIT_MAX + 8];
    uint8_t *n = rec + 3;
    size_t k = 0;
    if (name[0] >= '0' && name[0] <= '9')
        n[k++] = '_';
    for (size_t i = 0; name[i] && k < OTF_METRIC_NAME_MAX; i++, k++)
        n[k] = is(name[i], k == 0 ? C_FIRST : C_NAME) ? (uint8_t)name[i] : '_';
    uint8_t *u = n + k;
    size_t ku = 0;
    for (size_t i = 0; unit && unit[i] && ku < OTF_METRIC_UNIT_MAX; i++)
        u[ku++] = is(unit[i], C_UNIT) ? (uint8_t)unit[i] : '_';
    rec[0] = (uint8_t)kind;
    rec[1] = (uint8_t)k;
    rec[2] = (uint8_t)ku;
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    put_be64(u + ku, bits);
    buf_put(b, rec, 3 + k + ku + 8);
    return 0;
}

long otf_metric_next(const char *p, size_t len, struct otf_metric *m)
{
    if (len == 0)
        return 0;
    const uint8_t *q = (const uint8_t *)p;
    if (len < 3 || (q[0] != 'c' && q[0] != 'g' && q[0] != 'h'))
        return TS_E_PROTOCOL;
    size_t nl = q[1], ul = q[2], total = 3 + nl + ul + 8;
    if (nl < 1 || nl > OTF_METRIC_NAME_MAX || ul > OTF_METRIC_UNIT_MAX || len < total)
        return TS_E_PROTOCOL;
    /* the frontend writes names and units into /metrics as they are: check every byte */
    if (!otf_metric_name_ok(p + 3, nl) || !otf_metric_unit_ok(p + 3 + nl, ul))
        return TS_E_PROTOCOL;
    uint64_t bits = get_be64(q + 3 + nl + ul);
    memcpy(&m->value, &bits, sizeof(bits));
    if (!isfinite(m->value))
        return TS_E_PROTOCOL;
    m->kind = (char)q[0];
    m->name = otf_sn(p + 3, nl);
    m->unit = otf_sn(p + 3 + nl, ul);
    return (long)total;
}

void otf_step_encode(uint8_t out[OTF_STEP_LEN], const struct otf_step *s)
{
    put_be64(out, (uint64_t)s->handle_us);
    put_be64(out + 8, (uint64_t)s->predict_us);
}

int otf_step_decode(struct otf_str v, struct otf_step *s)
{
    if (v.len != OTF_STEP_LEN)
        return TS_E_PROTOCOL;
    const uint8_t *q = (const uint8_t *)v.p;
    s->handle_us = (int64_t)get_be64(q);
    s->predict_us = (int64_t)get_be64(q + 8);
    return s->handle_us < 0 || s->predict_us < 0 ? TS_E_PROTOCOL : 0;
}
