/*
 * oip_json: OIP REST request bodies (frontend/http/oip_json.c), a differential target. The first
 * byte holds flags: bit 0, Triton's binary extension (the next two bytes, little-endian, give the
 * JSON length, as Inference-Header-Content-Length does); bit 1, the /generate route. The rest is
 * the body.
 *
 * The hand-written fast path may give up on anything, but a body it accepts must be one the
 * jansson path accepts too, with the same request: ids, names, datatypes, shapes, tensor bytes,
 * parameters and outputs. Any accepted request must hold tensors whose bytes match their datatype
 * and shape (what the worker is promised).
 */
#include "../../frontend/http/oip_json.c"

#include "core/core.h"
#include "fuzz_oip.h"

static struct server server;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    config_defaults(&server.cfg);
    srv = &server;
    return 0;
}

static int same_json(json_t *a, json_t *b)
{
    return (!a && !b) || (a && b && json_equal(a, b));
}

static void same_request(struct oip_json_req *a, struct oip_json_req *b)
{
    const struct oip_request *x = &a->r, *y = &b->r;
    FUZZ_CHECK((!x->id && !y->id) || (x->id && y->id && !strcmp(x->id, y->id)));
    FUZZ_CHECK(same_json(x->parameters, y->parameters));
    FUZZ_CHECK(x->n_inputs == y->n_inputs && x->generate == y->generate);
    for (size_t i = 0; i < x->n_inputs; i++) {
        const struct oip_tensor *s = &x->inputs[i], *t = &y->inputs[i];
        FUZZ_CHECK(!strcmp(s->name, t->name));
        FUZZ_CHECK(s->dtype == t->dtype && s->ndim == t->ndim);
        for (int d = 0; d < s->ndim; d++)
            FUZZ_CHECK(s->shape[d] == t->shape[d]);
        FUZZ_CHECK(s->nbytes == t->nbytes);
        FUZZ_CHECK(s->nbytes == 0 || memcmp(s->data, t->data, s->nbytes) == 0);
        FUZZ_CHECK(same_json(s->parameters, t->parameters));
    }
    FUZZ_CHECK(x->n_outputs == y->n_outputs);
    for (size_t i = 0; i < x->n_outputs; i++)
        FUZZ_CHECK(!strcmp(x->outputs[i], y->outputs[i]));
    FUZZ_CHECK(a->binary_all == b->binary_all);
    FUZZ_CHECK(same_json(a->binary_out, b->binary_out));
}

static void differential(const uint8_t *body, size_t len, int generate)
{
    struct oip_json_req fast, ref;
    parsed_init(&fast);
    fast.root = NULL;
    fast.copy = xmalloc(len + 1);
    memcpy(fast.copy, body, len);
    fast.copy[len] = '\0';
    int fast_ok = fast_parse(&fast, fast.copy, len);

    parsed_init(&ref);
    ref.copy = NULL;
    ref.root = json_loadb((const char *)body, len, 0, NULL);
    char err[1024];
    int ref_ok =
        ref.root && parse_request(&ref, ref.root, generate, body + len, 0, err, sizeof(err)) == 0;
    if (fast_ok) {
        if (!ref_ok)
            fprintf(stderr, "fast path accepted what the jansson path refuses: %s\n",
                    ref.root ? err : "malformed JSON");
        FUZZ_CHECK(ref_ok);
        same_request(&fast, &ref);
    }
    oip_json_free(&fast);
    oip_json_free(&ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int binary = data[0] & 1, generate = (data[0] >> 1) & 1;
    const uint8_t *body = data + 1;
    size_t len = size - 1, jlen = len;
    if (binary) {
        if (size < 3)
            return 0;
        body = data + 3;
        len = size - 3;
        jlen = (size_t)data[1] | (size_t)data[2] << 8;
        if (jlen == 0 || jlen > len) /* http_oip.c answers 400 before parsing */
            return 0;
    } else {
        differential(body, len, generate);
    }

    /* the parser as http_oip.c calls it, on a copy of exactly the body's size */
    uint8_t *copy = xmalloc(len ? len : 1);
    memcpy(copy, body, len);
    struct oip_json_req q;
    char err[1024] = "";
    int ok = oip_json_parse(&q, copy, len, jlen, binary, generate, err, sizeof(err)) == 0;
    if (ok)
        FUZZ_CHECK(q.r.generate ? q.r.text_input != NULL : q.r.n_inputs >= 1);
    fuzz_check_oip_request(ok, &q.r, err);
    oip_json_free(&q);
    free(copy);
    return 0;
}
