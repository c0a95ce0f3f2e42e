#include "../../common/otf.c"
#include "tap.h"

#define MAXF (1u << 20)

static int str_is(struct otf_str s, const char *c)
{
    return otf_str_eq(s, c);
}

/* Every strict prefix of a frame must decode as TS_E_INCOMPLETE. Each prefix is copied into a
 * buffer of exactly its size so that the sanitizer build catches any read past it. */
static void check_prefixes(const struct buf *b, int command)
{
    for (size_t k = 0; k < b->len; k++) {
        uint8_t *p = xmalloc(k ? k : 1);
        memcpy(p, b->data, k);
        long rc;
        if (command) {
            struct otf_command c;
            rc = otf_decode_command(p, k, MAXF, &c);
            CHECK(c.reqs == NULL && c.ids == NULL);
        } else {
            struct otf_response r;
            rc = otf_decode_response(p, k, MAXF, &r);
            CHECK(r.preds == NULL);
        }
        if (rc != TS_E_INCOMPLETE) {
            fprintf(stderr, "  prefix of %zu/%zu bytes gave %ld\n", k, b->len, rc);
            CHECK(0);
        }
        free(p);
    }
}

TEST(load_round_trip)
{
    struct buf b;
    buf_init(&b);
    struct otf_load l = {
        otf_s("resnet"), otf_s("/tmp/models/abc"), 8, otf_s("torchscript"), -1, otf_s(NULL), 1};
    otf_encode_load(&b, &l);
    /* 'L' + name(4+6) + path(4+15) + batch(4) + handler(4+11) + gpu(4) + envelope(4) + u8 */
    CHECK_EQ_INT(b.len, 1 + 10 + 19 + 4 + 15 + 4 + 4 + 1);
    CHECK_EQ_INT(b.data[0], 'L');
    struct otf_command c;
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'L');
    CHECK(str_is(c.load.model_name, "resnet"));
    CHECK(str_is(c.load.model_path, "/tmp/models/abc"));
    CHECK_EQ_INT(c.load.batch_size, 8);
    CHECK(str_is(c.load.handler, "torchscript"));
    CHECK_EQ_INT(c.load.gpu_id, -1);
    CHECK_EQ_INT(c.load.envelope.len, 0);
    CHECK_EQ_INT(c.load.limit_max_image_pixels, 1);
    otf_command_free(&c);
    check_prefixes(&b, 1);
    buf_free(&b);
}

static void encode_batch(struct buf *b)
{
    struct otf_kv h1[] = {{otf_s("content-type"), otf_s("application/json")},
                          {otf_s("ts_request_sequence_id"), otf_s("seq-1")}};
    struct otf_param p1[] = {{otf_s("body"), otf_s("application/json"), otf_s("{\"x\": [1, 2]}")},
                             {otf_s("extra"), otf_s(NULL), otf_sn("a\0b", 3)}};
    struct otf_request r1 = {otf_s("req-1"), h1, 2, p1, 2};
    struct otf_request r2 = {otf_s("req-2"), NULL, 0, NULL, 0};
    otf_encode_infer_begin(b);
    otf_encode_request(b, &r1);
    otf_encode_request(b, &r2);
    otf_encode_list_end(b);
}

TEST(infer_round_trip)
{
    struct buf b;
    buf_init(&b);
    encode_batch(&b);
    struct otf_command c;
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'I');
    CHECK_EQ_INT(c.n_reqs, 2);
    CHECK(str_is(c.reqs[0].id, "req-1"));
    CHECK_EQ_INT(c.reqs[0].n_headers, 2);
    CHECK(str_is(c.reqs[0].headers[1].key, "ts_request_sequence_id"));
    CHECK(str_is(c.reqs[0].headers[1].val, "seq-1"));
    CHECK_EQ_INT(c.reqs[0].n_params, 2);
    CHECK(str_is(c.reqs[0].params[0].name, "body"));
    CHECK(str_is(c.reqs[0].params[0].ctype, "application/json"));
    CHECK(str_is(c.reqs[0].params[0].value, "{\"x\": [1, 2]}"));
    CHECK_EQ_INT(c.reqs[0].params[1].ctype.len, 0);
    CHECK_EQ_INT(c.reqs[0].params[1].value.len, 3);
    CHECK(memcmp(c.reqs[0].params[1].value.p, "a\0b", 3) == 0);
    CHECK(str_is(c.reqs[1].id, "req-2"));
    CHECK_EQ_INT(c.reqs[1].n_headers, 0);
    CHECK_EQ_INT(c.reqs[1].n_params, 0);
    const struct otf_kv *kv = otf_find_kv(c.reqs[0].headers, c.reqs[0].n_headers, "content-type");
    CHECK(kv && str_is(kv->val, "application/json"));
    CHECK(otf_find_kv(c.reqs[0].headers, c.reqs[0].n_headers, "Content-Type") == NULL);
    otf_command_free(&c);
    check_prefixes(&b, 1);
    buf_free(&b);
}

TEST(cancel_and_seq_event_round_trip)
{
    struct buf b;
    buf_init(&b);
    struct otf_str ids[] = {otf_s("a"), otf_s("bb"), otf_s("ccc")};
    otf_encode_cancel(&b, ids, 3);
    struct otf_command c;
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'C');
    CHECK_EQ_INT(c.n_ids, 3);
    CHECK(str_is(c.ids[0], "a"));
    CHECK(str_is(c.ids[2], "ccc"));
    otf_command_free(&c);
    check_prefixes(&b, 1);

    for (int paused = 1; paused >= 0; paused--) {
        buf_reset(&b);
        otf_encode_pause(&b, ids + 1, 2, paused);
        CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
        CHECK_EQ_INT(c.cmd, paused ? 'P' : 'R');
        CHECK_EQ_INT(c.n_ids, 2);
        CHECK(str_is(c.ids[0], "bb"));
        CHECK(str_is(c.ids[1], "ccc"));
        otf_command_free(&c);
        check_prefixes(&b, 1);
    }

    buf_reset(&b);
    otf_encode_cancel(&b, NULL, 0);
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), 5);
    CHECK_EQ_INT(c.n_ids, 0);
    otf_command_free(&c);

    buf_reset(&b);
    otf_encode_seq_event(&b, otf_s("seq-42"), OTF_SEQ_TIMEOUT);
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'S');
    CHECK(str_is(c.seq_id, "seq-42"));
    CHECK_EQ_INT(c.seq_event, OTF_SEQ_TIMEOUT);
    otf_command_free(&c);
    check_prefixes(&b, 1);
    buf_free(&b);
}

TEST(input_and_input_end_round_trip)
{
    struct buf b;
    buf_init(&b);
    otf_encode_input(&b, otf_s("req-7"), otf_s("application/x-ts-oip"), otf_sn("a\0b", 3));
    struct otf_command c;
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'D');
    CHECK(str_is(c.input_id, "req-7"));
    CHECK(str_is(c.input_ctype, "application/x-ts-oip"));
    CHECK_EQ_INT(c.input_body.len, 3);
    CHECK(!memcmp(c.input_body.p, "a\0b", 3));
    otf_command_free(&c);
    check_prefixes(&b, 1);
    /* a body over the field limit is refused, not truncated */
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, 2, &c), TS_E_TOO_LARGE);

    buf_reset(&b);
    struct otf_str ids[] = {otf_s("req-7"), otf_s("req-8")};
    otf_encode_input_end(&b, ids, 2);
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), (long)b.len);
    CHECK_EQ_INT(c.cmd, 'E');
    CHECK_EQ_INT(c.n_ids, 2);
    CHECK(str_is(c.ids[1], "req-8"));
    otf_command_free(&c);
    check_prefixes(&b, 1);
    buf_free(&b);
}

static void encode_response(struct buf *b)
{
    struct otf_kv h[] = {{otf_s(OTF_STREAM_NEXT), otf_s("true")}, {otf_s("x"), otf_s("1")}};
    struct otf_prediction p1 = {otf_s("req-1"), otf_s("application/json"), 200, otf_s("OK"), h, 2,
                                otf_s("[3.5]")};
    struct otf_prediction p2 = {otf_s("req-2"),     otf_s(NULL), 507, otf_s("boom"), NULL, 0,
                                otf_sn("\0\1\2", 3)};
    otf_encode_response_begin(b, 200, otf_s("Prediction success"));
    otf_encode_prediction(b, &p1);
    otf_encode_prediction(b, &p2);
    otf_encode_list_end(b);
}

TEST(response_round_trip)
{
    struct buf b;
    buf_init(&b);
    encode_response(&b);
    struct otf_response r;
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, MAXF, &r), (long)b.len);
    CHECK_EQ_INT(r.code, 200);
    CHECK(str_is(r.msg, "Prediction success"));
    CHECK_EQ_INT(r.n_preds, 2);
    CHECK(str_is(r.preds[0].id, "req-1"));
    CHECK(str_is(r.preds[0].ctype, "application/json"));
    CHECK_EQ_INT(r.preds[0].status, 200);
    CHECK(str_is(r.preds[0].phrase, "OK"));
    CHECK_EQ_INT(r.preds[0].n_headers, 2);
    const struct otf_kv *kv = otf_find_kv(r.preds[0].headers, 2, OTF_STREAM_NEXT);
    CHECK(kv && str_is(kv->val, "true"));
    CHECK(str_is(r.preds[0].body, "[3.5]"));
    CHECK(str_is(r.preds[1].id, "req-2"));
    CHECK_EQ_INT(r.preds[1].status, 507);
    CHECK_EQ_INT(r.preds[1].n_headers, 0);
    CHECK_EQ_INT(r.preds[1].body.len, 3);
    CHECK(memcmp(r.preds[1].body.p, "\0\1\2", 3) == 0);
    char *s = otf_strdup(r.preds[1].ctype);
    CHECK_STR(s, "");
    free(s);
    s = otf_strdup(r.msg);
    CHECK_STR(s, "Prediction success");
    free(s);
    otf_response_free(&r);
    check_prefixes(&b, 0);

    /* a load reply: code and message, no predictions */
    buf_reset(&b);
    otf_encode_response_begin(&b, 200, otf_s("loaded"));
    otf_encode_list_end(&b);
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, MAXF, &r), (long)b.len);
    CHECK_EQ_INT(r.n_preds, 0);
    CHECK(str_is(r.msg, "loaded"));
    otf_response_free(&r);
    check_prefixes(&b, 0);
    buf_free(&b);
}

TEST(back_to_back_frames)
{
    struct buf b;
    buf_init(&b);
    encode_response(&b);
    size_t first = b.len;
    otf_encode_response_begin(&b, 500, otf_s("second"));
    otf_encode_list_end(&b);
    struct otf_response r;
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, MAXF, &r), (long)first);
    CHECK_EQ_INT(r.n_preds, 2);
    otf_response_free(&r);
    CHECK_EQ_INT(otf_decode_response(b.data + first, b.len - first, MAXF, &r),
                 (long)(b.len - first));
    CHECK_EQ_INT(r.code, 500);
    otf_response_free(&r);
    buf_free(&b);
}

TEST(too_large)
{
    struct buf b;
    buf_init(&b);
    encode_response(&b);
    struct otf_response r;
    /* "Prediction success" is 18 bytes: a max of 17 refuses it */
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, 17, &r), TS_E_TOO_LARGE);
    CHECK(r.preds == NULL);
    /* a length over the max is refused before the bytes arrive */
    buf_reset(&b);
    buf_put_i32(&b, 200);
    buf_put_i32(&b, 0x7fffffff);
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, MAXF, &r), TS_E_TOO_LARGE);
    buf_reset(&b);
    buf_put_u8(&b, 'I');
    buf_put_i32(&b, (int32_t)MAXF + 1);
    struct otf_command c;
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), TS_E_TOO_LARGE);
    buf_free(&b);
}

TEST(protocol_errors)
{
    struct buf b;
    buf_init(&b);
    struct otf_command c;
    buf_put_u8(&b, 'Z');
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), TS_E_PROTOCOL);
    buf_reset(&b);
    buf_put_u8(&b, 'C');
    buf_put_i32(&b, -7);
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), TS_E_PROTOCOL);
    struct otf_response r;
    buf_reset(&b);
    otf_encode_response_begin(&b, 200, otf_s("m"));
    otf_put_str(&b, otf_s("id"));
    otf_put_str(&b, otf_s("ct"));
    buf_put_i32(&b, 200);
    otf_put_str(&b, otf_s("OK"));
    buf_put_i32(&b, -3); /* negative header count */
    CHECK_EQ_INT(otf_decode_response(b.data, b.len, MAXF, &r), TS_E_PROTOCOL);
    CHECK(r.preds == NULL);
    buf_reset(&b);
    otf_encode_seq_event(&b, otf_s("s"), OTF_SEQ_END);
    b.data[b.len - 1] = 0; /* the closing -1 is now 0xffffff00 */
    CHECK_EQ_INT(otf_decode_command(b.data, b.len, MAXF, &c), TS_E_PROTOCOL);
    buf_free(&b);
}

/* Worker metric records: names and units made valid on the way out, read back exactly; anything
 * else is refused. */
TEST(metric_records)
{
    struct buf b;
    buf_init(&b);
    CHECK_EQ_INT(otf_metric_encode(&b, 'c', "Words", "Count", 3), 0);
    CHECK_EQ_INT(otf_metric_encode(&b, 'g', "9 bad-name\n", NULL, 0.1), 0);
    CHECK_EQ_INT(otf_metric_encode(&b, 'h', "x", "ms per:item", -2.5), 0);
    CHECK(otf_metric_encode(&b, 'x', "x", "ms", 1) == -EINVAL);
    CHECK(otf_metric_encode(&b, 'g', "", "ms", 1) == -EINVAL);
    CHECK(otf_metric_encode(&b, 'g', "x", "ms", 1.0 / 0.0) == -EINVAL);
    char long_name[200];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    CHECK_EQ_INT(otf_metric_encode(&b, 'g', long_name, long_name, 7), 0);
    /* the first record byte for byte: kind, lengths, name, unit, big-endian bits of 3.0 */
    static const uint8_t words[] = {'c', 5,   5,    'W',  'o', 'r', 'd', 's', 'C', 'o', 'u',
                                    'n', 't', 0x40, 0x08, 0,   0,   0,   0,   0,   0};
    CHECK(b.len > sizeof(words) && !memcmp(b.data, words, sizeof(words)));
    const char *p = (const char *)b.data;
    size_t left = b.len;
    struct otf_metric m;
    long n = otf_metric_next(p, left, &m);
    CHECK(n == (long)sizeof(words) && m.kind == 'c' && str_is(m.name, "Words") &&
          str_is(m.unit, "Count") && m.value == 3);
    p += n, left -= (size_t)n;
    n = otf_metric_next(p, left, &m);
    CHECK(n > 0 && m.kind == 'g' && str_is(m.name, "_9_bad_name_") && m.unit.len == 0 &&
          m.value == 0.1);
    p += n, left -= (size_t)n;
    n = otf_metric_next(p, left, &m);
    CHECK(n > 0 && m.kind == 'h' && str_is(m.unit, "ms_per_item") && m.value == -2.5);
    p += n, left -= (size_t)n;
    n = otf_metric_next(p, left, &m);
    CHECK(n > 0 && m.name.len == OTF_METRIC_NAME_MAX && m.unit.len == OTF_METRIC_UNIT_MAX);
    p += n, left -= (size_t)n;
    CHECK_EQ_INT(otf_metric_next(p, left, &m), 0);
    buf_free(&b);

    /* one good record (c x Count 1.0), then ways to break it */
    static const uint8_t one[] = {'c',  1,    5, 'x', 'C', 'o', 'u', 'n', 't',
                                  0x3f, 0xf0, 0, 0,   0,   0,   0,   0};
    CHECK(otf_metric_next((const char *)one, sizeof(one), &m) == (long)sizeof(one) &&
          m.value == 1.0);
    struct {
        size_t at;
        uint8_t byte;
    } bad[] = {
        {0, 'q'},  /* kind */
        {1, 0},    /* empty name */
        {1, 65},   /* name too long (and past the end) */
        {2, 25},   /* unit too long */
        {2, 6},    /* unit runs into the value */
        {3, '1'},  /* a name starts with a digit */
        {3, '-'},  /* not a name byte */
        {5, ' '},  /* not a unit byte */
        {5, ':'},  /* a metric name's byte, never a unit's (otf.h) */
        {9, 0x7f}, /* with {10, 0xf8}: NaN */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t rec[sizeof(one)];
        memcpy(rec, one, sizeof(one));
        rec[bad[i].at] = bad[i].byte;
        if (bad[i].at == 9)
            rec[10] = 0xf8;
        CHECK(otf_metric_next((const char *)rec, sizeof(rec), &m) == TS_E_PROTOCOL);
    }
    for (size_t cut = 1; cut < sizeof(one); cut++) /* a record is never cut */
        CHECK(otf_metric_next((const char *)one, cut, &m) == TS_E_PROTOCOL);
}

/* Step times: 16 bytes, big-endian, never negative. */
TEST(step_times)
{
    struct otf_step s = {.handle_us = 1234, .predict_us = (int64_t)1 << 40}, t;
    uint8_t v[OTF_STEP_LEN];
    otf_step_encode(v, &s);
    CHECK(v[6] == 0x04 && v[7] == 0xd2 && v[10] == 0x01 && v[15] == 0);
    CHECK_EQ_INT(otf_step_decode(otf_sn((const char *)v, sizeof(v)), &t), 0);
    CHECK(t.handle_us == 1234 && t.predict_us == (int64_t)1 << 40);
    CHECK_EQ_INT(otf_step_decode(otf_sn((const char *)v, sizeof(v) - 1), &t), TS_E_PROTOCOL);
    v[0] = 0x80;
    CHECK_EQ_INT(otf_step_decode(otf_sn((const char *)v, sizeof(v)), &t), TS_E_PROTOCOL);
}

int main(void)
{
    RUN(load_round_trip);
    RUN(infer_round_trip);
    RUN(cancel_and_seq_event_round_trip);
    RUN(input_and_input_end_round_trip);
    RUN(response_round_trip);
    RUN(back_to_back_frames);
    RUN(too_large);
    RUN(protocol_errors);
    RUN(metric_records);
    RUN(step_times);
    return tap_done();
}
