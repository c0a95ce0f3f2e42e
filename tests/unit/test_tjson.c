/* test_tjson: request bodies to tensors and tensors to JSON (backend/tjson.c). */
#include "../../backend/tjson.c"

#include "tap.h"

/* tjson uses two pure helpers of the shim; the unit test does not link libtorch */
size_t tsh_dtype_size(int dtype)
{
    return dtype == TSH_FLOAT64 || dtype == TSH_INT64 ? 8 : dtype == TSH_FLOAT16 ? 2 : 4;
}

int64_t tsh_numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
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
    RUN(raw_and_shape);
    RUN(write_rows);
    return tap_done();
}
