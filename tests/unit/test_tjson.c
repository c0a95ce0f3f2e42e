/* test_tjson: request bodies to tensors and tensors to JSON (backend/tjson.c). */
#include "../../backend/handlers/tjson.c"

#include "tap.h"

/* tjson uses two pure helpers of the shim; the unit test does not link libtorch */
size_t tsh_dtype_size(int dtype)
{
    return dtype == TSH_FLOAT64 || dtype == TSH_INT64 ? 8 : dtype == TSH_FLOAT16 ? 2 : 4;
}

static int parse(const char *s, struct tjson_input *in, char *err)
{
    return tjson_parse_json(s, strlen(s), 7, in, err, 256);
}

TEST(nested_list_shape_and_values)
{
    struct tjson_input in;
    char err[256];
    CHECK_EQ_INT(parse("{\"data\": [[1, 2.5, -3], [4, 5, 6e1]]}", &in, err), 0);
    CHECK_EQ_INT(in.ndim, 2);
    CHECK_EQ_INT(in.shape[0], 2);
    CHECK_EQ_INT(in.shape[1], 3);
    CHECK(in.data[1] == 2.5f && in.data[2] == -3.0f && in.data[5] == 60.0f);
    tjson_input_free(&in);
    CHECK_EQ_INT(parse("[7]", &in, err), 0);
    CHECK_EQ_INT(in.ndim, 1);
    tjson_input_free(&in);
    CHECK_EQ_INT(parse("{\"instances\": 3.5}", &in, err), 0);
    CHECK_EQ_INT(in.ndim, 0);
    CHECK(in.data[0] == 3.5f);
    tjson_input_free(&in);
}

TEST(errors_name_the_element)
{
    struct tjson_input in;
    char err[256];
    CHECK_EQ_INT(parse("{\"data\": [1, 2, \"x\"]}", &in, err), -1);
    CHECK_STR(err, "data[2]: expected a number, got string");
    CHECK_EQ_INT(parse("[[1, 2], [3]]", &in, err), -1);
    CHECK_STR(err, "data[1]: ragged list: 1 elements, expected 2");
    CHECK_EQ_INT(parse("[[1, 2], 3]", &in, err), -1);
    CHECK_STR(err, "data[1]: expected a list of 2, got number");
    CHECK_EQ_INT(parse("  \n", &in, err), -1);
    CHECK_STR(err, "empty body");
    CHECK_EQ_INT(parse("[]", &in, err), -1);
    CHECK_STR(err, "data: empty list");
    CHECK_EQ_INT(parse("{\"data\": [1,, 2]}", &in, err), -1);
    CHECK(!strncmp(err, "malformed JSON at line 1 column ", 32));
    CHECK_EQ_INT(parse("{\"x\": 1}", &in, err), -1);
    CHECK(strstr(err, "\"data\""));
}

/* The body through the jansson path alone (what tjson_parse_json did before the fast path). */
static int parse_slow(const char *s, struct tjson_input *in, char *err)
{
    memset(in, 0, sizeof(*in));
    return jansson_parse(s, strlen(s), 7, in, err, 256);
}

/* Both paths agree on shape and on every float, bit for bit. */
static int same_as_slow(const char *s)
{
    struct tjson_input a, b;
    char err[256];
    if (parse(s, &a, err) || parse_slow(s, &b, err))
        return 0;
    int ok = a.ndim == b.ndim && !memcmp(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim) &&
             !memcmp(a.data, b.data, sizeof(float) * (size_t)tsh_numel(a.shape, a.ndim));
    tjson_input_free(&a);
    tjson_input_free(&b);
    return ok;
}

static int fast_takes(const char *s)
{
    struct tjson_input in;
    memset(&in, 0, sizeof(in));
    int r = fast_parse(s, strlen(s), 7, &in);
    if (r)
        tjson_input_free(&in);
    return r;
}

TEST(fast_path_shapes)
{
    CHECK(fast_takes("{\"data\": [1, 2.5, -3]}"));
    CHECK(fast_takes(" {\n\"instances\" :[[1,2],[3,4]] }\r\n"));
    CHECK(fast_takes("{\"inputs\": [[[0.5]]]}"));
    CHECK(fast_takes("{\"input\": 7}"));
    CHECK(fast_takes("[1e3, -0.25E-2]"));
    CHECK(fast_takes("4.5"));
    /* anything else is left to jansson, which gives the answer or the error */
    CHECK(!fast_takes("{\"data\": [1, 2], \"extra\": 1}"));
    CHECK(!fast_takes("{\"x\": [1]}"));
    CHECK(!fast_takes("{\"da\\u0074a\": [1]}"));
    CHECK(!fast_takes("[1, \"2\"]"));
    CHECK(!fast_takes("[[1, 2], [3]]"));
    CHECK(!fast_takes("[[1, 2], 3]"));
    CHECK(!fast_takes("[1, [2]]"));
    CHECK(!fast_takes("[]"));
    CHECK(!fast_takes("[[]]"));
    CHECK(!fast_takes("[1,]"));
    CHECK(!fast_takes("[1 2]"));
    CHECK(!fast_takes("[01]"));
    CHECK(!fast_takes("[1.]"));
    CHECK(!fast_takes("[.5]"));
    CHECK(!fast_takes("[+1]"));
    CHECK(!fast_takes("[1e]"));
    CHECK(!fast_takes("[NaN]"));
    CHECK(!fast_takes("[1] x"));
    CHECK(!fast_takes("{\"data\": [1]"));
    CHECK(!fast_takes("[[[[[[[[1]]]]]]]]"));      /* deeper than max_dims 7 */
    CHECK(!fast_takes("[12345678901234567890]")); /* jansson: too big integer */
    CHECK(!fast_takes("[1e400]"));                /* jansson: real number overflow */
    CHECK(fast_takes("[[[[[[[1]]]]]]]"));
}

TEST(fast_path_equals_jansson)
{
    /* Clinger's exact case, the 17-digit floats Python writes for float32 values, 19 digits,
     * more than 19, big and tiny exponents, zeros and signs, integers up to 18 digits */
    static const char *const bodies[] = {
        "{\"data\": [0.1, -0.3523, 0.0149, 1, -2, 3.5, 6e1, 1E+2, 1e-2]}",
        "[-1.2345678806304932, 1.9999998807907104, 0.10000000149011612, -0.7071067690849304]",
        "[1.234567890123456789, 9.999999999999999999, 0.3000000000000000444]",
        "[1.2345678901234567890123, 0.100000000000000000000000001, 123456789012345678901.5]",
        "[1e-30, 3.4028234663852886e38, 3.4028235e38, 1.17549435e-38, 1.4e-45, 7e-46, 1e-400]",
        "[0, -0, 0.0, -0.0, 0e5, -0E-3]",
        "[123456789012345678, -999999999999999999, 16777217, 9007199254740993]",
        "[[1.00000005960464477539, 1.0000000596046447754], [1.00000017881393432617, 0.5]]",
        "[8388608.5, 8388609.5, 16777216.999999999, 3.0000001192092896]",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        CHECK(fast_takes(bodies[i]));
        if (!same_as_slow(bodies[i])) {
            fprintf(stderr, "  body %zu differs\n", i);
            CHECK(0);
        }
    }
    struct tjson_input in;
    char err[256];
    CHECK_EQ_INT(parse("[-0.0, -0]", &in, err), 0);
    CHECK(signbit(in.data[0]) && !signbit(in.data[1])); /* an integer -0 is jansson's 0 */
    tjson_input_free(&in);
    CHECK_EQ_INT(parse("[1e400]", &in, err), -1);
    CHECK(strstr(err, "real number overflow"));
    CHECK_EQ_INT(parse("{\"data\": [1, 2], \"extra\": 1}", &in, err), 0);
    CHECK_EQ_INT(in.shape[0], 2);
    tjson_input_free(&in);
}

/* Random numbers in many spellings: the fast path and jansson give the same floats. */
TEST(fast_path_random_numbers)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    struct buf b;
    buf_init(&b);
    for (int round = 0; round < 200; round++) {
        buf_reset(&b);
        buf_puts(&b, "{\"data\": [");
        for (int i = 0; i < 64; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            uint32_t bits = (uint32_t)x;
            float f;
            memcpy(&f, &bits, sizeof(f));
            if (!isfinite(f))
                f = (float)(x >> 40) / 1e5f;
            double d = (double)f + (double)(int32_t)(x >> 32) * 1e-12 * (double)f;
            static const char *const fmts[] = {"%.17g", "%.9g", "%.4f", "%.19g", "%.25g", "%g"};
            buf_printf(&b, "%s", i ? ", " : "");
            double v = (x >> 24) & 1 ? d : (double)f;
            /* huge values in a format that may print them as integers jansson refuses */
            buf_printf(&b, fabs(v) < 1e17 ? fmts[(x >> 20) % 6] : "%.17g", v);
        }
        buf_puts(&b, "]}");
        if (!same_as_slow((const char *)b.data)) {
            fprintf(stderr, "  differs: %s\n", (const char *)b.data);
            CHECK(0);
        }
    }
    buf_free(&b);
}

/* The float formatter prints exactly what printf's %.9g does, or declines (then printf does). */
TEST(format_float9_is_printf)
{
    static const float cases[] = {0.0f,     -0.0f,           1.0f,          -2.0f,
                                  0.1f,     1e-8f,           16777216.0f,   16777.21875f,
                                  1e9f,     123456789.0f,    999999999.0f,  9999999999.0f,
                                  1e-4f,    9.99999975e-05f, 3.4028235e38f, 1.17549435e-38f,
                                  1.4e-45f, 0.00012345678f,  12345.6789f,   1e-5f};
    char a[64], c[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = format_float9(a, cases[i]);
        snprintf(c, sizeof(c), "%.9g", (double)cases[i]);
        if (n) {
            a[n] = '\0';
            CHECK_STR(a, c);
        }
    }
    CHECK(format_float9(a, 0.1f) > 0 && format_float9(a, 3.4028235e38f) > 0);
    uint32_t x = 2463534242u;
    long covered = 0;
    for (int i = 0; i < 300000; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        /* half of them with exponents of typical model outputs (2^-20 .. 2^20) */
        uint32_t bits = i & 1 ? x : (x & 0x807fffffu) | ((107u + (x >> 8) % 40) << 23);
        float f;
        memcpy(&f, &bits, sizeof(f));
        if (!isfinite(f))
            continue;
        size_t n = format_float9(a, f);
        if (!n)
            continue;
        covered++;
        a[n] = '\0';
        snprintf(c, sizeof(c), "%.9g", (double)f);
        CHECK_STR(a, c);
    }
    CHECK(covered > 200000);
}

TEST(huge_shape_is_refused_not_wrapped)
{
    int64_t shape[TSH_MAX_DIMS];
    int ndim;
    char err[256];
    /* 4611686018427387905 * 64 wraps to 64 in 64 bits: it must not match a 256-byte body */
    CHECK_EQ_INT(tjson_parse_shape("4611686018427387905,64", shape, &ndim, err, sizeof(err)), 0);
    CHECK_EQ_INT(tsh_numel(shape, ndim), -1);
    float v[64] = {0};
    struct tjson_input in;
    CHECK_EQ_INT(tjson_parse_raw(v, sizeof(v), shape, ndim, &in, err, sizeof(err)), -1);
    CHECK(strstr(err, "too many elements") != NULL);
    int64_t neg[2] = {-1, 64};
    CHECK_EQ_INT(tsh_numel(neg, 2), -1);
    int64_t ok[3] = {2, 3, 4};
    CHECK_EQ_INT(tsh_numel(ok, 3), 24);
    CHECK_EQ_INT(tsh_numel(ok, 0), 1);
}

/* The shape comes from the first element at each depth: seven levels of [x, [], [], ...]
 * claim 40^7 floats (655 GB) in 834 bytes. The ragged list is named, nothing is allocated. */
TEST(ragged_claim_is_not_allocated)
{
    struct buf b;
    buf_init(&b);
    buf_puts(&b, "1");
    for (int d = 0; d < 7; d++) {
        struct buf n;
        buf_init(&n);
        buf_puts(&n, "[");
        buf_put(&n, b.data, b.len);
        for (int k = 1; k < 40; k++)
            buf_puts(&n, ",[]");
        buf_puts(&n, "]");
        buf_free(&b);
        b = n;
    }
    struct tjson_input in;
    char err[256];
    CHECK_EQ_INT(parse((const char *)b.data, &in, err), -1);
    CHECK_STR(err, "data[0][0][0][0][0][0][1]: expected a number, got list");
    buf_free(&b);
}

TEST(raw_and_shape)
{
    int64_t shape[TSH_MAX_DIMS];
    int ndim;
    char err[256];
    CHECK_EQ_INT(tjson_parse_shape("2, 3", shape, &ndim, err, sizeof(err)), 0);
    CHECK_EQ_INT(ndim, 2);
    CHECK_EQ_INT(shape[1], 3);
    CHECK_EQ_INT(tjson_parse_shape("[4]", shape, &ndim, err, sizeof(err)), 0);
    CHECK_EQ_INT(shape[0], 4);
    CHECK_EQ_INT(tjson_parse_shape("2,x", shape, &ndim, err, sizeof(err)), -1);
    float v[6] = {1, 2, 3, 4, 5, 6};
    struct tjson_input in;
    int64_t s23[2] = {2, 3};
    CHECK_EQ_INT(tjson_parse_raw(v, sizeof(v), s23, 2, &in, err, sizeof(err)), 0);
    CHECK(in.data[5] == 6.0f);
    tjson_input_free(&in);
    int64_t s22[2] = {2, 2};
    CHECK_EQ_INT(tjson_parse_raw(v, sizeof(v), s22, 2, &in, err, sizeof(err)), -1);
    CHECK_STR(err, "raw float32 body has 6 elements, shape [2,2] needs 4");
    CHECK_EQ_INT(tjson_parse_raw(v, 5, NULL, 0, &in, err, sizeof(err)), -1);
}

TEST(write_rows)
{
    float v[6] = {0.1f, 1, -2, 3.5f, 1e-8f, 16777217.0f};
    struct tsh_tensor t = {.dtype = TSH_FLOAT32, .shape = {3, 2}, .ndim = 2, .data = v};
    struct buf b;
    buf_init(&b);
    tjson_write_rows(&b, &t, 1, 1, 1);
    CHECK_STR((char *)b.data, "[-2, 3.5]");
    buf_reset(&b);
    tjson_write_rows(&b, &t, 0, 2, 0);
    CHECK_STR((char *)b.data, "[[0.100000001, 1], [-2, 3.5]]");
    buf_reset(&b);
    tjson_write_rows(&b, &t, 2, 1, 1);
    CHECK_STR((char *)b.data, "[9.99999994e-09, 16777216]");
    buf_reset(&b);
    v[0] = NAN;
    v[1] = -INFINITY;
    tjson_write_rows(&b, &t, 0, 1, 1);
    CHECK_STR((char *)b.data, "[NaN, -Infinity]");
    buf_free(&b);
}

int main(void)
{
    RUN(nested_list_shape_and_values);
    RUN(errors_name_the_element);
    RUN(huge_shape_is_refused_not_wrapped);
    RUN(ragged_claim_is_not_allocated);
    RUN(raw_and_shape);
    RUN(write_rows);
    RUN(fast_path_shapes);
    RUN(fast_path_equals_jansson);
    RUN(fast_path_random_numbers);
    RUN(format_float9_is_printf);
    return tap_done();
}
