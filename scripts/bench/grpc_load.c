/*
 * grpc_load: a closed-loop load generator for unary gRPC calls, on gRPC C core.
 *
 *   grpc_load HOST:PORT METHOD MODEL INPUT_FILE CONNECTIONS INFLIGHT SECONDS
 *
 * Sends PredictionsRequest{model_name = MODEL, input = {"data": <INPUT_FILE bytes>}} to METHOD
 * (e.g. /org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions) with INFLIGHT calls
 * outstanding at all times, spread round-robin over CONNECTIONS channels (each its own HTTP/2
 * connection), for SECONDS. Each call is one batch of the six client ops. Prints one line:
 *   calls=N errors=E seconds=S calls_per_s=R p50_us=A p90_us=B p99_us=C
 * One thread drives everything through one completion queue.
 *
 *   grpc_load --first HOST:PORT MODEL INPUT_FILE RUNS
 *
 * Time to first message instead: RUNS sequential StreamPredictions calls with the same request,
 * one at a time on one connection, and as many Ping calls for comparison. Prints one line:
 *   ping_p50_us=P first_p50_us=A first_p90_us=B last_p50_us=C messages=M
 * (first/last: from the call's start to its first and last response message.)
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

struct slot {
    grpc_call *call;
    grpc_metadata_array init_md, trail_md;
    grpc_byte_buffer *send, *resp;
    grpc_status_code status;
    grpc_slice details;
    int64_t t0;
    int chan;
    int busy;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* protobuf varint */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        p[n++] = b | (v ? 0x80 : 0);
    } while (v);
    return n;
}

/* PredictionsRequest{1: model_name, 3: {1: "data", 2: value}} */
static grpc_slice encode_request(const char *model, const uint8_t *val, size_t vlen)
{
    size_t mlen = strlen(model);
    size_t cap = mlen + vlen + 64;
    uint8_t *b = malloc(cap), entry_hdr[32];
    size_t n = 0;
    b[n++] = 0x0a;
    n += put_varint(b + n, mlen);
    memcpy(b + n, model, mlen);
    n += mlen;
    /* the map entry: key "data" (field 1), value (field 2) */
    size_t e = 0;
    entry_hdr[e++] = 0x0a;
    entry_hdr[e++] = 4;
    memcpy(entry_hdr + e, "data", 4);
    e += 4;
    entry_hdr[e++] = 0x12;
    e += put_varint(entry_hdr + e, vlen);
    b[n++] = 0x1a;
    n += put_varint(b + n, e + vlen);
    memcpy(b + n, entry_hdr, e);
    n += e;
    memcpy(b + n, val, vlen);
    n += vlen;
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)b, n);
    free(b);
    return s;
}

static grpc_channel **chans;
static grpc_completion_queue *cq;
static grpc_slice method, payload;

static void start_call(struct slot *s)
{
    s->call = grpc_channel_create_call(chans[s->chan], NULL, GRPC_PROPAGATE_DEFAULTS, cq, method,
                                       NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array_init(&s->init_md);
    grpc_metadata_array_init(&s->trail_md);
    grpc_slice p = grpc_slice_ref(payload);
    s->send = grpc_raw_byte_buffer_create(&p, 1);
    grpc_slice_unref(p);
    s->resp = NULL;
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = s->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &s->resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &s->trail_md;
    ops[5].data.recv_status_on_client.status = &s->status;
    ops[5].data.recv_status_on_client.status_details = &s->details;
    s->t0 = now_us();
    s->busy = 1;
    if (grpc_call_start_batch(s->call, ops, 6, s, NULL) != GRPC_CALL_OK) {
        fprintf(stderr, "grpc_load: start_batch failed\n");
        exit(1);
    }
}

static void end_call(struct slot *s)
{
    grpc_metadata_array_destroy(&s->init_md);
    grpc_metadata_array_destroy(&s->trail_md);
    grpc_byte_buffer_destroy(s->send);
    if (s->resp)
        grpc_byte_buffer_destroy(s->resp);
    grpc_slice_unref(s->details);
    grpc_call_unref(s->call);
    s->busy = 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The request's input value: the file's bytes (up to 1 MB), or NULL after saying why. */
static const uint8_t *read_input(const char *path, size_t *len)
{
    static uint8_t in[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    *len = fread(in, 1, sizeof(in), f);
    fclose(f);
    return in;
}

static void close_cq(void)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

/* Runs one batch on the otherwise idle cq and waits for it; its success flag. */
static int run_batch(grpc_call *c, const grpc_op *ops, size_t n)
{
    if (grpc_call_start_batch(c, ops, n, (void *)c, NULL) != GRPC_CALL_OK) {
        fprintf(stderr, "grpc_load: start_batch failed\n");
        exit(1);
    }
    return grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).success;
}

/* One call of `path` with `req`, its responses read one at a time; the times from the start to
 * the first and the last response message, and their count. Exits on a failed call. */
static int timed_call(grpc_channel *ch, const char *path, grpc_slice req, int64_t *first,
                      int64_t *last)
{
    int64_t t0 = now_us();
    grpc_call *c = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                            grpc_slice_from_static_string(path), NULL,
                                            gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_slice r = grpc_slice_ref(req);
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&r, 1), *resp = NULL;
    grpc_slice_unref(r);
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    run_batch(c, ops, 4);
    int n = 0;
    for (;;) {
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_RECV_MESSAGE;
        ops[0].data.recv_message.recv_message = &resp;
        run_batch(c, ops, 1);
        if (!resp)
            break;
        *last = now_us() - t0;
        if (n++ == 0)
            *first = *last;
        grpc_byte_buffer_destroy(resp);
        resp = NULL;
    }
    grpc_status_code status;
    grpc_slice details;
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[0].data.recv_status_on_client.status = &status;
    ops[0].data.recv_status_on_client.status_details = &details;
    run_batch(c, ops, 1);
    if (status != GRPC_STATUS_OK || n == 0) {
        char *d = grpc_slice_to_c_string(details);
        fprintf(stderr, "grpc_load: %s failed: status %d %s\n", path, (int)status, d);
        exit(1);
    }
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_byte_buffer_destroy(send);
    grpc_call_unref(c);
    return n;
}

static int first_mode(const char *target, grpc_slice req, int runs)
{
    cq = grpc_completion_queue_create_for_next(NULL);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, NULL);
    grpc_channel_credentials_release(cr);
    const char *svc = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/";
    char ping[128], stream[128];
    snprintf(ping, sizeof(ping), "%sPing", svc);
    snprintf(stream, sizeof(stream), "%sStreamPredictions", svc);
    int32_t *pings = calloc((size_t)runs, sizeof(int32_t)),
            *firsts = calloc((size_t)runs, sizeof(int32_t)),
            *lasts = calloc((size_t)runs, sizeof(int32_t));
    int msgs = 0;
    for (int i = -20; i < runs; i++) { /* 20 of each first, not counted */
        int64_t f, l;
        timed_call(ch, ping, grpc_empty_slice(), &f, &l);
        if (i >= 0)
            pings[i] = (int32_t)l;
        msgs = timed_call(ch, stream, req, &f, &l);
        if (i >= 0) {
            firsts[i] = (int32_t)f;
            lasts[i] = (int32_t)l;
        }
    }
    qsort(pings, (size_t)runs, sizeof(int32_t), cmp_i32);
    qsort(firsts, (size_t)runs, sizeof(int32_t), cmp_i32);
    qsort(lasts, (size_t)runs, sizeof(int32_t), cmp_i32);
    printf("ping_p50_us=%d first_p50_us=%d first_p90_us=%d last_p50_us=%d messages=%d\n",
           pings[runs / 2], firsts[runs / 2], firsts[runs * 9 / 10], lasts[runs / 2], msgs);
    grpc_channel_destroy(ch);
    close_cq();
    free(pings);
    free(firsts);
    free(lasts);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--first")) {
        size_t inlen;
        const uint8_t *in = read_input(argv[4], &inlen);
        if (!in)
            return 2;
        grpc_init();
        grpc_slice req = encode_request(argv[3], in, inlen);
        int rc = first_mode(argv[2], req, atoi(argv[5]));
        grpc_slice_unref(req);
        grpc_shutdown();
        return rc;
    }
    if (argc != 8) {
        fprintf(stderr,
                "usage: %s HOST:PORT METHOD MODEL INPUT_FILE CONNECTIONS INFLIGHT SECONDS\n"
                "       %s --first HOST:PORT MODEL INPUT_FILE RUNS\n",
                argv[0], argv[0]);
        return 2;
    }
    const char *target = argv[1];
    int nconn = atoi(argv[5]), inflight = atoi(argv[6]);
    double seconds = atof(argv[7]);
    size_t inlen;
    const uint8_t *in = read_input(argv[4], &inlen);
    if (!in)
        return 2;

    grpc_init();
    method = grpc_slice_from_static_string(argv[2]);
    payload = encode_request(argv[3], in, inlen);
    cq = grpc_completion_queue_create_for_next(NULL);
    chans = calloc((size_t)nconn, sizeof(*chans));
    for (int i = 0; i < nconn; i++) {
        /* a private subchannel pool and a distinct arg: one TCP connection per channel */
        grpc_arg args[2];
        args[0].type = GRPC_ARG_INTEGER;
        args[0].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
        args[0].value.integer = 1;
        args[1].type = GRPC_ARG_INTEGER;
        args[1].key = (char *)"grpc_load.connection";
        args[1].value.integer = i;
        grpc_channel_args ca = {2, args};
        grpc_channel_credentials *cr = grpc_insecure_credentials_create();
        chans[i] = grpc_channel_create(target, cr, &ca);
        grpc_channel_credentials_release(cr);
    }
    struct slot *slots = calloc((size_t)inflight, sizeof(*slots));
    size_t cap = 1 << 20, n = 0;
    int32_t *lat = malloc(cap * sizeof(*lat));
    long errors = 0;
    int64_t start = now_us(), end = start + (int64_t)(seconds * 1e6);
    for (int i = 0; i < inflight; i++) {
        slots[i].chan = i % nconn;
        start_call(&slots[i]);
    }
    int busy = inflight;
    int64_t last_done = start;
    while (busy > 0) {
        grpc_event ev = grpc_completion_queue_next(
            cq, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(200, GPR_TIMESPAN)),
            NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct slot *s = ev.tag;
        int64_t t = now_us();
        if (ev.success && s->status == GRPC_STATUS_OK && s->resp) {
            if (n == cap) {
                cap *= 2;
                lat = realloc(lat, cap * sizeof(*lat));
            }
            lat[n++] = (int32_t)(t - s->t0);
        } else {
            if (errors < 5) {
                char *d = grpc_slice_to_c_string(s->details);
                fprintf(stderr, "grpc_load: call failed: status %d %s\n", (int)s->status, d);
                gpr_free(d);
            }
            errors++;
        }
        end_call(s);
        busy--;
        if (t < end) {
            start_call(s);
            busy++;
        } else {
            last_done = t;
        }
    }
    double secs = (double)(last_done - start) / 1e6;
    /* the client's own CPU per call (all its threads): on a machine it shares with the server,
     * what it takes is what the server cannot have */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    qsort(lat, n, sizeof(*lat), cmp_i32);
    printf("calls=%zu errors=%ld seconds=%.2f calls_per_s=%.0f p50_us=%d p90_us=%d p99_us=%d "
           "client_cpu_us_per_call=%.1f\n",
           n, errors, secs, n / secs, n ? lat[n / 2] : 0, n ? lat[n * 9 / 10] : 0,
           n ? lat[n * 99 / 100] : 0, n ? cpu_us / (double)n : 0.0);
    for (int i = 0; i < nconn; i++)
        grpc_channel_destroy(chans[i]);
    close_cq();
    grpc_slice_unref(payload);
    grpc_shutdown();
    free(lat);
    free(slots);
    free(chans);
    return errors ? 1 : 0;
}
