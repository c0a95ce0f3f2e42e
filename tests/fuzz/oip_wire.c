/*
 * oip_wire: OIP tensor payloads (common/oip_wire.c) as a worker answers them (first byte 0: the
 * frontend reads "outputs", oip_req.c) and as the frontend sends them (first byte 1: the worker
 * reads "inputs" and the requested outputs, backend/handlers/oip.c). A differential target: the
 * fast header scan may give up on anything, but what it accepts the jansson path must accept
 * with the same tensors; and every tensor either path accepts lies inside the payload and
 * matches its datatype and shape.
 */
#include <jansson.h>

#include "fuzz.h"
#include "oip_wire.h"

static void check_tensors(const struct oip_tensor *t, size_t n, const uint8_t *raw, size_t rawlen)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        char why[256];
        FUZZ_CHECK(t[i].name && t[i].dtype >= 0 && t[i].dtype < OIP_DTYPE_COUNT);
        FUZZ_CHECK(t[i].data == raw + off && t[i].nbytes <= rawlen - off);
        off += t[i].nbytes;
        FUZZ_CHECK(oip_check_data(t[i].dtype, t[i].shape, t[i].ndim, t[i].data, t[i].nbytes, why,
                                  sizeof(why)) == 0);
    }
    FUZZ_CHECK(off == rawlen || n == 0); /* no tensors at all: the bytes are not looked at */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || data[0] > 1)
        return 0;
    const char *key = data[0] ? "inputs" : "outputs";
    /* a copy of exactly the payload's size, so that a read past it is seen */
    size_t len = size - 1;
    uint8_t *p = xmalloc(len ? len : 1);
    memcpy(p, data + 1, len);
    const char *js;
    size_t jl, rawlen;
    const uint8_t *raw;
    char err[512];
    if (oip_wire_split(p, len, &js, &jl, &raw, &rawlen, err, sizeof(err))) {
        free(p);
        return 0;
    }
    FUZZ_CHECK((const uint8_t *)js == p + 8 && raw == p + 8 + jl && 8 + jl + rawlen == len);

    static struct oip_tensor fast[OIP_MAX_TENSORS], ref[OIP_MAX_TENSORS];
    const char *outs[OIP_MAX_TENSORS];
    size_t nf = 0, nr = 0, nouts = 0;
    char *scratch = xmalloc(jl + 1);
    int fast_ok = oip_wire_scan(js, jl, scratch, key, raw, rawlen, fast, OIP_MAX_TENSORS, &nf,
                                data[0] ? outs : NULL, data[0] ? &nouts : NULL);
    json_t *h = json_loadb(js, jl, 0, NULL);
    int ref_ok = h && oip_wire_tensors(h, key, raw, rawlen, ref, OIP_MAX_TENSORS, &nr, err,
                                       sizeof(err)) == 0;
    if (fast_ok) {
        check_tensors(fast, nf, raw, rawlen);
        FUZZ_CHECK(nouts <= OIP_MAX_TENSORS);
        for (size_t i = 0; i < nouts; i++)
            FUZZ_CHECK(outs[i] && outs[i] >= scratch && outs[i] < scratch + jl);
        FUZZ_CHECK(ref_ok && nr == nf);
        for (size_t i = 0; i < nf; i++) {
            FUZZ_CHECK(!strcmp(fast[i].name, ref[i].name) && fast[i].dtype == ref[i].dtype);
            FUZZ_CHECK(fast[i].ndim == ref[i].ndim && fast[i].nbytes == ref[i].nbytes);
            FUZZ_CHECK(!memcmp(fast[i].shape, ref[i].shape, sizeof(int64_t) * fast[i].ndim));
        }
    }
    if (ref_ok)
        check_tensors(ref, nr, raw, rawlen);
    json_decref(h);
    free(scratch);
    free(p);
    return 0;
}
