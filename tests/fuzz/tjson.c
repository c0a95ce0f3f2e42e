/*
 * tjson: the worker's request bodies (backend/tjson.c), a differential target. The fast path
 * (one pass, common/jnum.c numbers) must give exactly what the jansson path gives, shape and
 * float bits, whenever it accepts a body; it may give up on anything. Every accepted body must
 * also print (tjson_write_tensor, float32 through jnum_f32) as JSON that reads back to the same
 * numbers. The same bytes are also read as an X-Shape header and a raw float32 body.
 */
#include "../../backend/handlers/tjson.c"

#include "fuzz.h"

/* tjson's one use of the shim outside the inline helpers; the worker links libtorch for it */
size_t tsh_dtype_size(int dtype)
{
    return dtype == TSH_FLOAT64 || dtype == TSH_INT64                            ? 8
           : dtype == TSH_FLOAT16 || dtype == TSH_BFLOAT16 || dtype == TSH_INT16 ? 2
           : dtype == TSH_INT8 || dtype == TSH_UINT8 || dtype == TSH_BOOL        ? 1
                                                                                 : 4;
}

/* what the torchscript handler passes */
#define MAX_DIMS (TSH_MAX_DIMS - 1)

static void round_trip(const struct tjson_input *in)
{
    int64_t numel = tsh_numel(in->shape, in->ndim);
    for (int64_t i = 0; i < numel; i++)
        if (!isfinite(in->data[i]))
            return; /* printed as NaN / Infinity, which JSON has no words for */
    struct tsh_tensor t = {TSH_FLOAT32, {0}, in->ndim, in->data, (size_t)numel * sizeof(float)};
    memcpy(t.shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    struct buf b;
    buf_init(&b);
    tjson_write_tensor(&b, &t);
    struct tjson_input back;
    char err[512];
    memset(&back, 0, sizeof(back));
    FUZZ_CHECK(jansson_parse((const char *)b.data, b.len, MAX_DIMS, &back, err, sizeof(err)) == 0);
    FUZZ_CHECK(back.ndim == in->ndim);
    for (int d = 0; d < in->ndim; d++)
        FUZZ_CHECK(back.shape[d] == in->shape[d]);
    for (int64_t i = 0; i < numel; i++)
        FUZZ_CHECK(back.data[i] == in->data[i]); /* -0 prints as "-0", an integer: 0 */
    tjson_input_free(&back);
    buf_free(&b);
}

static void shape_and_raw(const uint8_t *data, size_t size)
{
    char spec[256];
    size_t n = size < sizeof(spec) - 1 ? size : sizeof(spec) - 1;
    memcpy(spec, data, n);
    spec[n] = '\0';
    int64_t shape[TSH_MAX_DIMS];
    int ndim = 0;
    char err[512];
    if (tjson_parse_shape(spec, shape, &ndim, err, sizeof(err)))
        return;
    FUZZ_CHECK(ndim >= 1 && ndim <= TSH_MAX_DIMS);
    struct tjson_input in;
    if (tjson_parse_raw(data, size, shape, ndim, &in, err, sizeof(err)) == 0) {
        FUZZ_CHECK(tsh_numel(in.shape, in.ndim) * 4 == (int64_t)size);
        tjson_input_free(&in);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct tjson_input f, j;
    char err[512];
    memset(&f, 0, sizeof(f));
    memset(&j, 0, sizeof(j));
    int fast = fast_parse(body, size, MAX_DIMS, &f);
    int ref = -1;
    if (size && !all_space(body, size))
        ref = jansson_parse(body, size, MAX_DIMS, &j, err, sizeof(err));
    if (fast) {
        FUZZ_CHECK(ref == 0);
        FUZZ_CHECK(f.ndim == j.ndim);
        for (int d = 0; d < f.ndim; d++)
            FUZZ_CHECK(f.shape[d] == j.shape[d]);
        int64_t numel = tsh_numel(f.shape, f.ndim);
        FUZZ_CHECK(numel >= 1);
        FUZZ_CHECK(memcmp(f.data, j.data, (size_t)numel * sizeof(float)) == 0);
        round_trip(&f);
    } else if (ref == 0) {
        round_trip(&j);
    }
    tjson_input_free(&f);
    tjson_input_free(&j);

    struct tjson_input t;
    int rc = tjson_parse_json(body, size, MAX_DIMS, &t, err, sizeof(err));
    FUZZ_CHECK((rc == 0) == (fast || ref == 0));
    if (rc == 0)
        tjson_input_free(&t);
    else
        FUZZ_CHECK(err[0]);
    shape_and_raw(data, size);
    return 0;
}
