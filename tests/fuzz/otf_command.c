/*
 * otf_command: frontend -> worker frames (common/otf.c otf_decode_command), as the worker reads
 * them from its socket (backend/worker/worker.c). A decoded frame must lie inside the bytes
 * consumed, encode back to exactly those bytes, and every shorter prefix of it must ask for more
 * bytes. The same bytes with a 16-byte field limit must give the same frame or a clean refusal.
 */
#include "fuzz.h"
#include "otf.h"

#define MAXF (1u << 20)

static void in_frame(struct otf_str s, const uint8_t *p, long n)
{
    FUZZ_CHECK(s.len >= 0 && (size_t)s.len <= MAXF);
    if (s.len)
        FUZZ_CHECK((const uint8_t *)s.p >= p && (const uint8_t *)s.p + s.len <= p + n);
}

static void encode(struct buf *b, const struct otf_command *c)
{
    switch (c->cmd) {
    case OTF_CMD_LOAD:
        otf_encode_load(b, &c->load);
        break;
    case OTF_CMD_INFER:
        otf_encode_infer_begin(b);
        for (size_t i = 0; i < c->n_reqs; i++)
            otf_encode_request(b, &c->reqs[i]);
        otf_encode_list_end(b);
        break;
    case OTF_CMD_CANCEL:
        otf_encode_cancel(b, c->ids, c->n_ids);
        break;
    case OTF_CMD_PAUSE:
    case OTF_CMD_RESUME:
        otf_encode_pause(b, c->ids, c->n_ids, c->cmd == OTF_CMD_PAUSE);
        break;
    case OTF_CMD_SEQ_EVENT:
        otf_encode_seq_event(b, c->seq_id, c->seq_event);
        break;
    case OTF_CMD_INPUT:
        otf_encode_input(b, c->input_id, c->input_ctype, c->input_body);
        break;
    case OTF_CMD_INPUT_END:
        otf_encode_input_end(b, c->ids, c->n_ids);
        break;
    default:
        FUZZ_CHECK(!"decoded an unknown command");
    }
}

static long decode_free(const uint8_t *p, size_t len, size_t max_field)
{
    struct otf_command c;
    long n = otf_decode_command(p, len, max_field, &c);
    if (n > 0)
        otf_command_free(&c);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct otf_command c;
    long n = otf_decode_command(data, size, MAXF, &c);
    if (n < 0) {
        FUZZ_CHECK(n == TS_E_INCOMPLETE || n == TS_E_PROTOCOL || n == TS_E_TOO_LARGE);
        FUZZ_CHECK(!c.reqs && !c.ids && !c.n_reqs && !c.n_ids);
        return 0;
    }
    FUZZ_CHECK(n > 0 && (size_t)n <= size);
    in_frame(c.load.model_name, data, n);
    in_frame(c.load.model_path, data, n);
    in_frame(c.load.handler, data, n);
    in_frame(c.load.envelope, data, n);
    in_frame(c.seq_id, data, n);
    in_frame(c.input_id, data, n);
    in_frame(c.input_ctype, data, n);
    in_frame(c.input_body, data, n);
    for (size_t i = 0; i < c.n_ids; i++)
        in_frame(c.ids[i], data, n);
    for (size_t i = 0; i < c.n_reqs; i++) {
        const struct otf_request *q = &c.reqs[i];
        in_frame(q->id, data, n);
        for (size_t k = 0; k < q->n_headers; k++) {
            in_frame(q->headers[k].key, data, n);
            in_frame(q->headers[k].val, data, n);
        }
        for (size_t k = 0; k < q->n_params; k++) {
            in_frame(q->params[k].name, data, n);
            in_frame(q->params[k].ctype, data, n);
            in_frame(q->params[k].value, data, n);
        }
    }
    /* the encoder writes a batch size < 1 as 1 (a load the frontend never sends) */
    if (c.cmd != OTF_CMD_LOAD || c.load.batch_size > 0) {
        struct buf b;
        buf_init(&b);
        encode(&b, &c);
        FUZZ_CHECK(b.len == (size_t)n && memcmp(b.data, data, (size_t)n) == 0);
        buf_free(&b);
    }
    otf_command_free(&c);

    fuzz_check_frame_cuts(data, size, n, decode_free);
    return 0;
}
