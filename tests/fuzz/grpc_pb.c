/*
 * grpc_pb: request messages of the gRPC services as they arrive (bytes nobody checked). The
 * first byte picks the request type (the table below: every type a method unpacks); the rest is
 * the message. Each input goes through what grpc_server.c and the services do with it: the
 * NUL-string check of frontend/grpc/pb_req.c on the wire bytes, protobuf-c's unpacker, then
 * the conversion that consumes the message: the PredictionsRequest input map's last-wins rule
 * (checked against the obvious quadratic rule) and oip_pb_parse for ModelInferRequest, whose
 * tensors must match their datatype and shape.
 *
 * The NUL check must never fire on bytes without a 0 byte, nor on a message protobuf-c packed
 * (its strings are C strings: they cannot hold a NUL).
 *
 * Every message is also unpacked with pb_req's stack arena (predict_message's way), into a
 * buffer of 64 to PB_ARENA_BYTES bytes picked by the first byte, so that the spill to malloc
 * comes at every point: it must unpack exactly when malloc's unpack does, to the same bytes once
 * packed, and free_unpacked only when something spilled must leave nothing behind (LSan).
 */
#include "fuzz_oip.h"
#include "grpc/oip_pb.h"
#include "grpc/pb_req.h"
#include "core/core.h"
#include "inference.pb-c.h"
#include "management.pb-c.h"
#include "oip_grpc.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &org__pytorch__serve__grpc__inference__predictions_request__descriptor,
    &org__pytorch__serve__grpc__management__describe_model_request__descriptor,
    &org__pytorch__serve__grpc__management__list_models_request__descriptor,
    &org__pytorch__serve__grpc__management__register_model_request__descriptor,
    &org__pytorch__serve__grpc__management__scale_worker_request__descriptor,
    &org__pytorch__serve__grpc__management__set_default_request__descriptor,
    &org__pytorch__serve__grpc__management__unregister_model_request__descriptor,
    &inference__model_ready_request__descriptor,
    &inference__model_metadata_request__descriptor,
    &inference__model_infer_request__descriptor,
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

static struct server server;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    config_defaults(&server.cfg);
    srv = &server;
    return 0;
}

static void predictions(const Org__Pytorch__Serve__Grpc__Inference__PredictionsRequest *q)
{
    size_t n = q->n_input;
    const char **keys = xmalloc((n ? n : 1) * sizeof(*keys));
    size_t *keep = xmalloc((n ? n : 1) * sizeof(*keep));
    for (size_t i = 0; i < n; i++)
        keys[i] = q->input[i]->key;
    size_t m = pb_req_last_keys(keys, n, keep);
    FUZZ_CHECK(m <= n && (n == 0 || m >= 1));
    if (n <= 512) { /* the rule as it reads: an entry counts unless a later one has its key */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int later = 0;
            for (size_t j = i + 1; j < n && !later; j++)
                later = !strcmp(keys[i] ? keys[i] : "", keys[j] ? keys[j] : "");
            if (!later) {
                FUZZ_CHECK(k < m && keep[k] == i);
                k++;
            }
        }
        FUZZ_CHECK(k == m);
    }
    free(keys);
    free(keep);
}

static void model_infer(const Inference__ModelInferRequest *q)
{
    struct oip_pb_req ps;
    memset(&ps, 0, sizeof(ps));
    buf_init(&ps.raw);
    char err[1024] = "";
    int ok = oip_pb_parse(q, &ps, err, sizeof(err)) == 0;
    if (ok)
        FUZZ_CHECK(ps.r.n_inputs == q->n_inputs && ps.r.n_outputs == q->n_outputs);
    fuzz_check_oip_request(ok, &ps.r, err);
    oip_pb_req_free(&ps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *d = types[data[0] % N_TYPES];
    size_t n = size - 1;
    uint8_t *p = xmalloc(n ? n : 1); /* exactly the message's size */
    memcpy(p, data + 1, n);
    char name[96];
    int nul = pb_req_nul_field(d, p, n, name, sizeof(name));
    if (nul)
        FUZZ_CHECK(memchr(p, 0, n) && name[0]);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
    _Alignas(max_align_t) unsigned char mem[PB_ARENA_BYTES];
    struct pb_arena arena;
    pb_arena_init(&arena, mem, (size_t)PB_ARENA_BYTES >> (data[0] / N_TYPES % 7));
    ProtobufCMessage *am = protobuf_c_message_unpack(d, &arena.alloc, n, p);
    free(p);
    FUZZ_CHECK(!m == !am);
    if (am) {
        size_t asz = protobuf_c_message_get_packed_size(am);
        FUZZ_CHECK(asz == protobuf_c_message_get_packed_size(m));
        uint8_t *a1 = xmalloc(asz ? asz : 1), *a2 = xmalloc(asz ? asz : 1);
        FUZZ_CHECK(protobuf_c_message_pack(am, a1) == asz && protobuf_c_message_pack(m, a2) == asz);
        FUZZ_CHECK(memcmp(a1, a2, asz) == 0);
        free(a1);
        free(a2);
        if (arena.spilled)
            protobuf_c_message_free_unpacked(am, &arena.alloc);
    }
    if (!m)
        return 0;
    /* re-packed, the message holds no NUL in a string (protobuf-c's own round trip is not ours
     * to check: it keeps an unknown field numbered 0, then refuses the bytes it packs for it) */
    size_t psz = protobuf_c_message_get_packed_size(m);
    uint8_t *packed = xmalloc(psz ? psz : 1);
    FUZZ_CHECK(protobuf_c_message_pack(m, packed) == psz);
    FUZZ_CHECK(!pb_req_nul_field(d, packed, psz, name, sizeof(name)));
    free(packed);
    if (!nul) { /* what the services see: a message that passed the check */
        if (d == types[0])
            predictions((const Org__Pytorch__Serve__Grpc__Inference__PredictionsRequest *)m);
        else if (d == &inference__model_infer_request__descriptor)
            model_infer((const Inference__ModelInferRequest *)m);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
