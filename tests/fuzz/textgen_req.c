/*
 * textgen_req: the textgen handler's request bodies (backend/handlers/textgen_req.c), a client's
 * bytes in the worker. The first byte: bit 0, a JSON content type; bit 1, a max_new_tokens query
 * parameter taken from the next bytes up to a NUL. The rest is the body.
 *
 * An accepted body must keep every promise the handler relies on: the prompt is a NUL-terminated
 * copy of plen bytes, max_new_tokens is -1 or in [0, TEXTGEN_MAX_NEW_LIMIT], temperature finite in
 * [0, 100], top_p in (0, 1], at most 4 stop sequences of 1 to 64 bytes (textstop takes them).
 * Sampling from logits made of the body's bytes with those parameters gives a token in range,
 * and the same token again from the same generator state.
 */
#include "../../backend/handlers/textgen_req.c"

#include <math.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t off = 1;
    char param[32];
    const char *mp = NULL;
    if (data[0] & 2) {
        size_t k = 0;
        while (off < size && data[off] && k < sizeof(param) - 1)
            param[k++] = (char)data[off++];
        param[k] = '\0';
        off += off < size;
        mp = param;
    }
    struct textgen_params p;
    char err[512] = "";
    const char *body = (const char *)data + off;
    if (textgen_req_parse(body, size - off, data[0] & 1 ? "application/json" : "", mp, &p, err,
                          sizeof(err))) {
        FUZZ_CHECK(err[0]);
        return 0;
    }
    FUZZ_CHECK(p.prompt && p.prompt[p.plen] == '\0');
    FUZZ_CHECK(p.max_new >= -1 && p.max_new <= TEXTGEN_MAX_NEW_LIMIT);
    FUZZ_CHECK(isfinite(p.temperature) && p.temperature >= 0 && p.temperature <= 100);
    FUZZ_CHECK(p.top_p > 0 && p.top_p <= 1);
    FUZZ_CHECK(p.nstop <= TEXTSTOP_MAX);
    const char *stops[TEXTSTOP_MAX];
    for (size_t i = 0; i < p.nstop; i++) {
        FUZZ_CHECK(p.stop_len[i] >= 1 && p.stop_len[i] <= TEXTSTOP_MAX_LEN);
        stops[i] = p.stop[i];
    }
    struct textstop ts;
    FUZZ_CHECK(textstop_init(&ts, stops, p.stop_len, p.nstop) == 0);
    textstop_free(&ts);
    float logits[64];
    for (size_t i = 0; i < 64; i++)
        logits[i] = (float)(data[i % size] - 128) / 8.0f;
    uint64_t r1 = p.seed, r2 = p.seed;
    int64_t a = textgen_sample(logits, 64, p.temperature, p.top_p, &r1);
    int64_t b = textgen_sample(logits, 64, p.temperature, p.top_p, &r2);
    FUZZ_CHECK(a >= 0 && a < 64 && a == b && r1 == r2);
    textgen_params_free(&p);
    return 0;
}
