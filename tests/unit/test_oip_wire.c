#include "../../common/oip_wire.c"
#include "tap.h"

#include <math.h>

TEST(dtype_table)
{
    CHECK_EQ_INT(oip_dtype_from_name("FP32"), OIP_FP32);
    CHECK_EQ_INT(oip_dtype_from_name("BYTES"), OIP_BYTES);
    CHECK_EQ_INT(oip_dtype_from_name("fp32"), -1);
    CHECK_EQ_INT(oip_dtype_from_name("FP33"), -1);
    CHECK_EQ_INT((int)oip_dtype_size(OIP_INT16), 2);
    CHECK_EQ_INT((int)oip_dtype_size(OIP_BYTES), 0);
    CHECK_STR(oip_dtype_name(OIP_UINT64), "UINT64");
}

TEST(numel_and_check)
{
    int64_t sh[2] = {2, 3};
    char err[256];
    uint8_t d[24] = {0};
    CHECK_EQ_INT((int)oip_numel(sh, 2), 6);
    CHECK_EQ_INT(oip_check_data(OIP_FP32, sh, 2, d, 24, err, sizeof err), 0);
    CHECK_EQ_INT(oip_check_data(OIP_FP32, sh, 2, d, 20, err, sizeof err), -1);
    CHECK_STR(err, "expected 24 bytes for FP32 [2,3], got 20");
    int64_t big[2] = {INT64_MAX, 4};
    CHECK_EQ_INT((int)oip_numel(big, 2), -1);
    /* a valid element count whose byte size overflows int64: said so, without computing it */
    int64_t huge[2] = {1234567890123456789LL, 2};
    CHECK_EQ_INT(oip_check_data(OIP_FP64, huge, 2, d, 2, err, sizeof err), -1);
    CHECK_STR(err, "FP64 [1234567890123456789,2] is too large, got 2 bytes");
    /* BYTES: length-prefixed elements, exactly numel of them */
    uint8_t b[] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
    int64_t two[1] = {2};
    CHECK_EQ_INT(oip_check_data(OIP_BYTES, two, 1, b, sizeof b, err, sizeof err), 0);
    CHECK_EQ_INT(oip_check_data(OIP_BYTES, two, 1, b, sizeof b - 1, err, sizeof err), -1);
    int64_t three[1] = {3};
    CHECK_EQ_INT(oip_check_data(OIP_BYTES, three, 1, b, sizeof b, err, sizeof err), -1);
    CHECK_STR(err, "BYTES shape [3] needs 3 element(s), got 2");
}

TEST(half_and_bf16)
{
    float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333333f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = oip_half_to_float(oip_float_to_half(vals[i]));
        CHECK(fabsf(back - vals[i]) <= fabsf(vals[i]) * 1e-3f);
        float bb = oip_bf16_to_float(oip_float_to_bf16(vals[i]));
        CHECK(fabsf(bb - vals[i]) <= fabsf(vals[i]) * 1e-2f + 1e-30f);
    }
    CHECK_EQ_INT(oip_float_to_half(1.0f), 0x3c00);
    CHECK_EQ_INT(oip_float_to_half(1e6f), 0x7c00); /* overflow: infinity */
    CHECK(isnan(oip_half_to_float(oip_float_to_half(NAN))));
    CHECK_EQ_INT(oip_float_to_bf16(1.0f), 0x3f80);
}

TEST(payload_round_trip)
{
    struct buf b;
    buf_init(&b);
    const char *hdr =
        "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT32\",\"shape\":[2],\"size\":8},"
        "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[1],\"size\":7}]}";
    oip_wire_put_header(&b, hdr, strlen(hdr));
    int32_t x[2] = {7, -1};
    buf_put(&b, x, 8);
    buf_put(&b, "\3\0\0\0abc", 7);
    const char *js;
    size_t jl, rl, n;
    const uint8_t *raw;
    char err[256];
    CHECK_EQ_INT(oip_wire_split(b.data, b.len, &js, &jl, &raw, &rl, err, sizeof err), 0);
    CHECK_EQ_INT((int)jl, (int)strlen(hdr));
    json_t *h = json_loadb(js, jl, 0, NULL);
    struct oip_tensor t[4];
    CHECK_EQ_INT(oip_wire_tensors(h, "inputs", raw, rl, t, 4, &n, err, sizeof err), 0);
    CHECK_EQ_INT((int)n, 2);
    CHECK_STR(t[0].name, "x");
    CHECK_EQ_INT(t[0].dtype, OIP_INT32);
    CHECK(!memcmp(t[0].data, x, 8));
    const uint8_t *p = t[1].data, *s;
    uint32_t len;
    CHECK_EQ_INT(oip_bytes_next(&p, t[1].data + t[1].nbytes, &s, &len), 1);
    CHECK_EQ_INT((int)len, 3);
    CHECK(!memcmp(s, "abc", 3));
    /* a truncated payload names the tensor */
    CHECK_EQ_INT(oip_wire_tensors(h, "inputs", raw, rl - 1, t, 4, &n, err, sizeof err), -1);
    CHECK_STR(err, "inputs[1].size: 7 bytes exceed the payload");
    CHECK_EQ_INT(oip_wire_split("OIP1\xff\0\0\0", 8, &js, &jl, &raw, &rl, err, sizeof err), -1);
    CHECK_EQ_INT(oip_wire_split("XXXX", 4, &js, &jl, &raw, &rl, err, sizeof err), -1);
    json_decref(h);
    buf_free(&b);
}

/* oip_wire_scan reads what put_desc writes, agrees with the jansson path, and declines the rest */
TEST(fast_scan)
{
    struct buf h;
    buf_init(&h);
    int64_t sh0[2] = {1, 2}, sh1[1] = {1};
    buf_puts(&h, "{\"id\":\"r1\",\"inputs\":[");
    oip_wire_put_desc(&h, 1, "input__0", OIP_FP32, sh0, 2, 8);
    oip_wire_put_desc(&h, 0, "s", OIP_BYTES, sh1, 1, 7);
    buf_puts(&h, "],\"outputs\":[\"output__0\",\"b\"]}");
    static const char want[] =
        "{\"id\":\"r1\",\"inputs\":[{\"name\":\"input__0\",\"datatype\":\"FP32\","
        "\"shape\":[1,2],\"size\":8},{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[1],"
        "\"size\":7}],\"outputs\":[\"output__0\",\"b\"]}";
    CHECK(h.len == strlen(want) && !memcmp(h.data, want, h.len));
    uint8_t raw[15];
    float f[2] = {1.5f, -2};
    memcpy(raw, f, 8);
    memcpy(raw + 8, "\3\0\0\0abc", 7);
    char *scratch = malloc(h.len + 1);
    struct oip_tensor t[4];
    const char *outs[OIP_MAX_TENSORS];
    size_t n = 9, no = 9;
    CHECK_EQ_INT(
        oip_wire_scan((const char *)h.data, h.len, scratch, "inputs", raw, 15, t, 4, &n, outs, &no),
        1);
    CHECK_EQ_INT((int)n, 2);
    CHECK_EQ_INT((int)no, 2);
    CHECK_STR(t[0].name, "input__0");
    CHECK_EQ_INT(t[0].dtype, OIP_FP32);
    CHECK_EQ_INT(t[0].ndim, 2);
    CHECK_EQ_INT((int)t[0].shape[1], 2);
    CHECK(t[0].data == raw && t[0].nbytes == 8 && !t[0].parameters);
    CHECK(t[1].data == raw + 8 && t[1].nbytes == 7);
    CHECK_STR(outs[1], "b");
    /* the jansson path reads the same */
    json_t *j = json_loadb((const char *)h.data, h.len, 0, NULL);
    struct oip_tensor u[4];
    char err[256];
    CHECK_EQ_INT(oip_wire_tensors(j, "inputs", raw, 15, u, 4, &n, err, sizeof err), 0);
    CHECK(!strcmp(u[1].name, t[1].name) && u[1].nbytes == t[1].nbytes && u[0].ndim == t[0].ndim);
    json_decref(j);
    /* declined: bad data length, left-over data, too many tensors, other keys or forms */
    CHECK_EQ_INT(
        oip_wire_scan((const char *)h.data, h.len, scratch, "inputs", raw, 14, t, 4, &n, outs, &no),
        0);
    CHECK_EQ_INT(
        oip_wire_scan((const char *)h.data, h.len, scratch, "inputs", raw, 15, t, 1, &n, outs, &no),
        0);
    CHECK_EQ_INT(oip_wire_scan((const char *)h.data, h.len, scratch, "inputs", raw, 15, t, 4, &n,
                               NULL, NULL),
                 0); /* "outputs" is not expected */
    static const char *const declined[] = {
        "{\"parameters\":{},\"outputs\":[]}",
        "{\"outputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"size\":4,"
        "\"parameters\":{}}]}",
        "{\"outputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1.0],\"size\":4}]}",
        "{\"outputs\":[{\"name\":\"x\\u0041\",\"datatype\":\"FP32\",\"shape\":[1],\"size\":4}]}",
        "{\"outputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"size\":4}]} x",
        "{\"outputs\":[{\"name\":\"x\",\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"size\":4}]}",
        "{\"outputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[-1],\"size\":4}]}",
    };
    for (size_t i = 0; i < sizeof(declined) / sizeof(declined[0]); i++) {
        char s2[256];
        CHECK_EQ_INT(oip_wire_scan(declined[i], strlen(declined[i]), s2, "outputs", raw, 4, t, 4,
                                   &n, NULL, NULL),
                     0);
    }
    const char *ok = " { \"outputs\" : [ { \"size\":4, \"shape\":[ 1 ], \"datatype\":\"FP32\", "
                     "\"name\":\"y\" } ] } ";
    char s3[256];
    CHECK_EQ_INT(oip_wire_scan(ok, strlen(ok), s3, "outputs", raw, 4, t, 4, &n, NULL, NULL), 1);
    CHECK_STR(t[0].name, "y");
    free(scratch);
    buf_free(&h);
}

int main(void)
{
    RUN(dtype_table);
    RUN(numel_and_check);
    RUN(half_and_bf16);
    RUN(payload_round_trip);
    RUN(fast_scan);
    return tap_done();
}
