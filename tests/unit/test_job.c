/* A job on its own (frontend/core/job.c): references, the three ways it ends, and that it reaches
 * the queue side only through its owner and the transport only through its sink. No loop, no
 * worker: a stub owner records what the job asks of it. */
#include "../../frontend/core/job.c"
#include "tap.h"

static struct {
    int withdrawn, frames, ended, was_running, paused, input;
} own;

static void o_withdraw(struct job *j)
{
    (void)j;
    own.withdrawn++;
}
static void o_frame(struct job *j, const struct otf_prediction *p)
{
    (void)j;
    (void)p;
    own.frames++;
}
static void o_ended(struct job *j, int was_running)
{
    (void)j;
    own.ended++;
    own.was_running = was_running;
}
static void o_pause(struct job *j, int paused)
{
    j->paused = paused;
    own.paused = paused ? own.paused + 1 : own.paused - 1;
}
static void o_input(struct job *j)
{
    (void)j;
    own.input++;
}
static const struct job_owner owner = {o_withdraw, o_frame, o_ended, o_pause, o_input};

static struct {
    int frames, finals, errors, status;
} sink_seen;

static void s_frame(struct job *j, const struct otf_prediction *p, int final)
{
    (void)p;
    sink_seen.frames++;
    sink_seen.finals += final;
    if (final)
        job_unref(j);
}
static void s_error(struct job *j, int status, const char *type, const char *msg)
{
    (void)type;
    (void)msg;
    sink_seen.errors++;
    sink_seen.status = status;
    job_unref(j);
}
static const struct job_sink sink = {s_frame, s_error};

/* A job as the dispatcher holds it: the transport's reference plus the queue's. */
static struct job *held(enum job_state st)
{
    memset(&own, 0, sizeof(own));
    memset(&sink_seen, 0, sizeof(sink_seen));
    struct job *j = job_new("client-id", &sink, NULL);
    job_ref(j);
    j->owner = &owner;
    j->state = st;
    return j;
}

TEST(ids_and_headers)
{
    struct job *a = job_new("same", &sink, NULL), *b = job_new("same", &sink, NULL);
    CHECK(strcmp(a->id, b->id) != 0); /* two clients may send the same x-request-id */
    CHECK_STR(a->rid, "same");
    CHECK_STR(job_header(a, "X-Request-ID"), "same");
    job_add_header(a, "Accept", "text/plain", 10);
    job_add_header(a, "accept", "text/event-stream", 17);
    CHECK_STR(job_header(a, "ACCEPT"), "text/event-stream"); /* the last one wins */
    job_add_param_owned(a, "body", "application/json", xstrdup("{}"), 2);
    job_add_param_owned(b, "data", NULL, xstrdup(""), 0);
    struct job_otf o;
    job_to_otf(a, &o);
    CHECK(otf_str_eq(o.r.id, a->id));
    CHECK(o.r.headers == o.few_h && o.r.params == o.few_p); /* nothing allocated */
    CHECK_EQ_INT(o.r.n_headers, 3);
    CHECK(otf_str_eq(o.r.headers[2].key, "accept"));
    CHECK(otf_str_eq(o.r.headers[2].val, "text/event-stream"));
    CHECK_EQ_INT(o.r.n_params, 1);
    CHECK(otf_str_eq(o.r.params[0].name, "body"));
    CHECK(otf_str_eq(o.r.params[0].ctype, "application/json"));
    CHECK(otf_str_eq(o.r.params[0].value, "{}"));
    job_otf_done(&o);
    job_to_otf(b, &o);
    CHECK(otf_str_eq(o.r.params[0].name, "data"));
    CHECK(otf_str_eq(o.r.params[0].ctype, "")); /* no content type reads as "" */
    job_otf_done(&o);
    job_unref(a);
    job_unref(b);
}

/* More headers and parameters than the view's own arrays hold: it allocates, keeps every one in
 * order, and job_otf_done frees them (LeakSanitizer). */
TEST(otf_view_of_a_large_job)
{
    struct job *j = job_new(NULL, &sink, NULL);
    char k[32], v[32];
    for (int i = 0; i < JOB_OTF_FEW_HEADERS + 3; i++) {
        snprintf(k, sizeof(k), "h%d", i);
        snprintf(v, sizeof(v), "v%d", i);
        job_add_header(j, k, v, strlen(v));
    }
    for (int i = 0; i < JOB_OTF_FEW_PARAMS + 2; i++) {
        snprintf(k, sizeof(k), "p%d", i);
        snprintf(v, sizeof(v), "text/x%d", i);
        job_add_param_owned(j, k, v, xstrdup(k), strlen(k));
    }
    struct job_otf o;
    job_to_otf(j, &o);
    CHECK(o.r.headers != o.few_h && o.r.params != o.few_p);
    CHECK_EQ_INT(o.r.n_headers, JOB_OTF_FEW_HEADERS + 3);
    CHECK_EQ_INT(o.r.n_params, JOB_OTF_FEW_PARAMS + 2);
    CHECK(otf_str_eq(o.r.headers[JOB_OTF_FEW_HEADERS + 2].key, "h34"));
    CHECK(otf_str_eq(o.r.headers[JOB_OTF_FEW_HEADERS + 2].val, "v34"));
    CHECK(otf_str_eq(o.r.params[JOB_OTF_FEW_PARAMS + 1].name, "p9"));
    CHECK(otf_str_eq(o.r.params[JOB_OTF_FEW_PARAMS + 1].ctype, "text/x9"));
    CHECK(otf_str_eq(o.r.params[JOB_OTF_FEW_PARAMS + 1].value, "p9"));
    job_otf_done(&o);
    job_unref(j);
}

TEST(final_frame_ends_the_job_once)
{
    struct job *j = held(JOB_RUNNING);
    struct otf_prediction pr = {.status = 200};
    job_deliver_frame(j, &pr, 0);
    CHECK_EQ_INT(own.frames, 1);
    CHECK_EQ_INT(own.ended, 0);
    job_deliver_frame(j, &pr, 1);
    CHECK_EQ_INT(own.frames, 2);
    CHECK_EQ_INT(own.ended, 1);
    CHECK_EQ_INT(own.was_running, 1);
    CHECK_EQ_INT(sink_seen.frames, 2);
    CHECK_EQ_INT(sink_seen.finals, 1);
    /* both references are gone: nothing left to check without a use-after-free (ASan) */
}

TEST(failure_ends_the_job_and_tells_the_transport)
{
    struct job *j = held(JOB_QUEUED);
    job_ref(j); /* to look at it afterwards */
    job_fail(j, 503, "ServiceUnavailableException", "no");
    CHECK_EQ_INT(sink_seen.errors, 1);
    CHECK_EQ_INT(sink_seen.status, 503);
    CHECK_EQ_INT(own.ended, 1);
    CHECK_EQ_INT(own.was_running, 0);
    CHECK_EQ_INT(j->state, JOB_DONE);
    CHECK_EQ_INT(j->refs, 1);
    job_unref(j);
}

TEST(cancel_withdraws_a_queued_or_running_job_and_never_calls_the_sink)
{
    for (int running = 0; running < 2; running++) {
        struct job *j = held(running ? JOB_RUNNING : JOB_QUEUED);
        job_cancel(j); /* the transport goes away... */
        CHECK_EQ_INT(own.withdrawn, 1);
        CHECK_EQ_INT(own.ended, 1);
        CHECK_EQ_INT(own.was_running, running);
        CHECK(j->sink == NULL);
        CHECK_EQ_INT(j->refs, 1); /* ...and drops its own reference after */
        struct otf_prediction pr = {.status = 200};
        job_deliver_frame(j, &pr, 0); /* a late frame reaches no transport */
        CHECK_EQ_INT(sink_seen.frames, 0);
        job_cancel(j); /* twice is harmless */
        CHECK_EQ_INT(own.withdrawn, 1);
        job_unref(j);
    }
}

TEST(pause_reaches_the_owner_only_while_running_and_once_per_change)
{
    struct job *j = held(JOB_QUEUED);
    job_pause(j, 1);
    CHECK_EQ_INT(own.paused, 0);
    j->state = JOB_RUNNING;
    job_pause(j, 1);
    job_pause(j, 1);
    CHECK_EQ_INT(own.paused, 1);
    job_pause(j, 0);
    CHECK_EQ_INT(own.paused, 0);
    job_cancel(j);
    job_unref(j);
}

static char *dup_body(const char *s)
{
    return xstrdup(s);
}

TEST(streamed_input_waits_while_queued_and_reaches_the_owner_while_running)
{
    struct job *j = held(JOB_NEW);
    job_open_input(j);
    CHECK_STR(job_header(j, OTF_INPUT_STREAM), "true");
    j->state = JOB_QUEUED;
    job_feed(j, "application/x-ts-oip", dup_body("one"), 3);
    CHECK_EQ_INT(own.input, 0); /* queued: it waits in the job for the dispatch */
    j->state = JOB_RUNNING;
    job_feed(j, "application/x-ts-oip", dup_body("two"), 3);
    CHECK_EQ_INT(own.input, 1);
    struct job_input *in = job_input_take(j);
    CHECK(in && in->len == 3 && !memcmp(in->body, "one", 3));
    CHECK_STR(in->ctype, "application/x-ts-oip");
    free(in->body);
    free(in);
    job_feed_end(j);
    CHECK_EQ_INT(own.input, 2);
    CHECK_EQ_INT(j->input_open, 0);
    /* after the end nothing more is taken; "two" is still there for the owner, and the job
     * frees what it holds (LeakSanitizer) */
    job_feed(j, "x", dup_body("three"), 5);
    CHECK_EQ_INT(own.input, 2);
    in = job_input_take(j);
    CHECK(in && !memcmp(in->body, "two", 3) && !j->in_head);
    free(in->body);
    free(in);
    job_feed(j, "x", dup_body("late"), 4); /* dropped */
    CHECK(j->in_head == NULL);
    job_cancel(j);
    job_unref(j);

    /* a job without streamed input takes none */
    j = held(JOB_RUNNING);
    job_feed(j, "x", dup_body("x"), 1);
    CHECK(j->in_head == NULL && own.input == 0);
    j->state = JOB_QUEUED;
    job_open_input(j);
    job_feed(j, "x", dup_body("kept"), 4); /* freed with the job */
    job_cancel(j);
    job_unref(j);
}

int main(void)
{
    RUN(ids_and_headers);
    RUN(otf_view_of_a_large_job);
    RUN(final_frame_ends_the_job_once);
    RUN(failure_ends_the_job_and_tells_the_transport);
    RUN(cancel_withdraws_a_queued_or_running_job_and_never_calls_the_sink);
    RUN(pause_reaches_the_owner_only_while_running_and_once_per_change);
    RUN(streamed_input_waits_while_queued_and_reaches_the_owner_while_running);
    return tap_done();
}
