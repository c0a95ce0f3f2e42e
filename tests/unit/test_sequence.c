/* Stateful sequences (frontend/core/sequence.c) against fake workers: order within a sequence,
 * at most one request per sequence in a batch, idle and session expiry with the worker told, the
 * next request of a sequence whose running request's client went away, and under continuous
 * batching the next request joining its streaming predecessor. */
#include "core_fake.h"

static struct model *seq_model(int batch_size, int idle_ms, int session_ms)
{
    struct model *m = fake_model(&(struct fake_model_opts){
        .batch_size = batch_size, .max_batch_delay_ms = 20, .sequences = 1});
    m->mc.max_seq_job_queue = 8;
    m->mc.max_num_sequence = 16;
    m->mc.seq_max_idle_ms = idle_ms;
    m->mc.seq_timeout_ms = session_ms;
    return m;
}

/* Submits one request of sequence id (start: its first), as a transport would. */
static int seq_submit(struct model *m, struct rec *r, const char *t, const char *how,
                      const char *id, int start, struct submit_error *e)
{
    struct job *j = rec_job(r, t, how);
    job_add_header(j, SEQ_HDR_ID, id, strlen(id));
    if (start)
        job_add_header(j, SEQ_HDR_START, "true", 4);
    int rc = model_submit_request(m, j, e);
    if (rc != 0)
        job_unref(j);
    return rc;
}

static int all_done(void *arg)
{
    struct rec *r = arg;
    for (int i = 0; i < 5; i++)
        if (!rec_done(&r[i]))
            return 0;
    return 1;
}

TEST(order_within_a_sequence_one_request_per_sequence_in_a_batch)
{
    core_setup();
    struct model *m = seq_model(4, 0, 0);
    struct rec r[5];
    struct submit_error e;
    CHECK_EQ_INT(seq_submit(m, &r[0], "A1", "wait:50", "A", 1, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[1], "A2", "wait:50", "A", 0, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[2], "A3", "wait:50", "A", 0, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[3], "B1", "wait:50", "B", 1, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[4], "B2", "wait:50", "B", 0, &e), 0);
    CHECK(run_until(all_done, r, 5000));
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(r[i].status, 200);
    /* three steps: each sequence's requests in order, never two of one sequence together */
    char *log = fake_log_text();
    char *a1 = strstr(log, "A1"), *a2 = strstr(log, "A2"), *a3 = strstr(log, "A3");
    char *b1 = strstr(log, "B1"), *b2 = strstr(log, "B2");
    CHECK(a1 && a2 && a3 && b1 && b2);
    CHECK(a1 < a2 && a2 < a3 && b1 < b2);
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, " I "))
            continue;
        int na = 0, nb = 0;
        for (char *p = line; (p = strchr(p, ' ')); p++)
            na += p[1] == 'A', nb += p[1] == 'B';
        CHECK(na <= 1 && nb <= 1);
    }
    free(log);
    core_teardown();
}

TEST(idle_sequence_expires_worker_is_told_late_request_gets_410)
{
    core_setup();
    struct model *m = seq_model(2, 200, 0);
    struct rec r[2];
    struct submit_error e;
    CHECK_EQ_INT(seq_submit(m, &r[0], "A1", NULL, "idle-seq", 1, &e), 0);
    CHECK(run_until(rec_done, &r[0], 2000));
    CHECK(run_until(log_has_cond, "S idle-seq 3", 2000)); /* OTF_SEQ_IDLE */
    CHECK(seq_submit(m, &r[1], "A2", NULL, "idle-seq", 0, &e) < 0);
    CHECK_EQ_INT(e.status, 410);
    CHECK(strstr(e.msg, "expired (idle 200 ms)") != NULL);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 0);
    core_teardown();
}

TEST(session_timeout_closes_a_busy_sequence)
{
    core_setup();
    struct model *m = seq_model(2, 0, 300);
    struct rec r[3];
    struct submit_error e;
    CHECK_EQ_INT(seq_submit(m, &r[0], "A1", NULL, "s", 1, &e), 0);
    CHECK(run_until(rec_done, &r[0], 2000));
    CHECK_EQ_INT(seq_submit(m, &r[1], "A2", NULL, "s", 0, &e), 0);
    CHECK(run_until(rec_done, &r[1], 2000));
    CHECK(run_until(log_has_cond, "S s 4", 2000)); /* OTF_SEQ_TIMEOUT */
    CHECK(seq_submit(m, &r[2], "A3", NULL, "s", 0, &e) < 0);
    CHECK_EQ_INT(e.status, 410);
    CHECK(strstr(e.msg, "session timeout 300 ms") != NULL);
    core_teardown();
}

TEST(next_request_goes_when_the_running_ones_client_leaves)
{
    /* A1 runs, A2 waits behind it; A1's client goes away. A2 used to stay queued until its own
     * client gave up (the dispatch ran before A1 let go of its sequence). */
    core_setup();
    struct model *m = seq_model(4, 0, 0);
    struct rec r[2];
    struct submit_error e;
    struct job *a1 = rec_job(&r[0], "A1", "hang");
    job_add_header(a1, SEQ_HDR_ID, "str", 3);
    job_add_header(a1, SEQ_HDR_START, "true", 4);
    CHECK_EQ_INT(model_submit_request(m, a1, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[1], "A2", NULL, "str", 0, &e), 0);
    CHECK(run_until(log_has_cond, "I A1", 2000));
    run_for(50);
    CHECK(!log_has("A2"));
    job_cancel(a1);
    job_unref(a1);
    CHECK(run_until(rec_done, &r[1], 1000));
    CHECK_STR(r[1].body, "ok:A2");
    CHECK(run_until(log_has_cond, "C A1", 2000)); /* the fake logs frames as it reads them */
    core_teardown();
}

TEST(a_sequence_cancel_fails_its_queued_requests_and_tells_the_worker)
{
    core_setup();
    struct model *m = seq_model(4, 0, 0);
    struct rec r[3];
    struct submit_error e;
    CHECK_EQ_INT(seq_submit(m, &r[0], "A1", "hang", "c", 1, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[1], "A2", NULL, "c", 0, &e), 0);
    CHECK(run_until(log_has_cond, "I A1", 2000));
    struct job *j = rec_job(&r[2], "X", NULL);
    job_add_header(j, SEQ_HDR_ID, "c", 1);
    job_add_header(j, SEQ_HDR_CANCEL, "true", 4);
    CHECK_EQ_INT(model_submit_request(m, j, &e), 1); /* carried out by the frontend */
    job_unref(j);
    CHECK_EQ_INT(r[0].status, 410); /* the running one */
    CHECK_EQ_INT(r[1].status, 410); /* the queued one */
    CHECK(strstr(r[1].err, "was cancelled") != NULL);
    CHECK(run_until(log_has_cond, "S c 2", 2000)); /* OTF_SEQ_CANCEL */
    CHECK(run_until(log_has_cond, "C A1", 2000));  /* the fake logs frames as it reads them */
    core_teardown();
}

TEST(an_unknown_client_id_starts_a_sequence_a_closed_one_gets_410)
{
    core_setup();
    struct model *m = seq_model(2, 200, 0);
    struct rec r[4];
    struct submit_error e;
    /* no start flag: the id was never seen, so it opens a sequence, and the worker is told */
    CHECK_EQ_INT(seq_submit(m, &r[0], "A1", NULL, "client-chosen", 0, &e), 0);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 1);
    CHECK(run_until(rec_done, &r[0], 2000));
    CHECK_EQ_INT(r[0].status, 200);
    CHECK_EQ_INT(seq_submit(m, &r[1], "A2", NULL, "client-chosen", 0, &e), 0);
    CHECK(run_until(rec_done, &r[1], 2000));
    CHECK_EQ_INT(sequence_open_count(m->seqs), 1);
    /* after it idles out, the same id without a start flag is refused, not reopened */
    CHECK(run_until(log_has_cond, "S client-chosen 3", 2000));
    CHECK(seq_submit(m, &r[2], "A3", NULL, "client-chosen", 0, &e) < 0);
    CHECK_EQ_INT(e.status, 410);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 0);
    /* a cancel of an id never seen opens nothing */
    struct job *j = rec_job(&r[3], "X", NULL);
    job_add_header(j, SEQ_HDR_ID, "never", 5);
    job_add_header(j, SEQ_HDR_CANCEL, "true", 4);
    CHECK(model_submit_request(m, j, &e) < 0);
    job_unref(j);
    CHECK_EQ_INT(e.status, 404);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 0);
    /* an unknown id of the form we generate was made by a server that lost it: 404, not a new
     * sequence; one character off the form, it is a client's choice like any other */
    const char *gone = "ts-seq-0b8e9f2a-4c1d-4e8f-9a7b-123456789abc";
    CHECK(seq_submit(m, &r[3], "G1", NULL, gone, 0, &e) < 0);
    CHECK_EQ_INT(e.status, 404);
    CHECK(strstr(e.msg, "no longer holds it") != NULL);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 0);
    struct rec r2[2];
    CHECK_EQ_INT(seq_submit(m, &r2[0], "G2", NULL, gone, 1, &e), 0); /* explicit start: fine */
    CHECK_EQ_INT(
        seq_submit(m, &r2[1], "G3", NULL, "ts-seq-0b8e9f2a-4c1d-4e8f-9a7b-123456789abZ", 0, &e), 0);
    CHECK_EQ_INT(sequence_open_count(m->seqs), 2);
    CHECK(run_until(rec_done, &r2[1], 2000));
    core_teardown();
}

/* issue 35: under continuous batching a sequence's next request joins while its predecessor
 * streams, even at batchSize 1 (TorchServe's stateful example: a -1 sent into a stream of odd
 * numbers ends it early), but only once the predecessor has been through a step, and another
 * sequence still waits for a slot (batchSize bounds the sequences a worker serves at once). */
TEST(continuous_next_request_joins_its_streaming_predecessor)
{
    core_setup();
    struct model *m = fake_model(
        &(struct fake_model_opts){.handler = "fake-continuous", .batch_size = 1, .sequences = 1});
    m->mc.continuous_batching = 1;
    m->mc.max_seq_job_queue = 8;
    m->mc.max_num_sequence = 4;
    CHECK(m->pool.continuous);
    struct rec r[3];
    struct submit_error e;
    CHECK_EQ_INT(seq_submit(m, &r[0], "S1", "stream:10:50", "A", 1, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[1], "S2", NULL, "A", 0, &e), 0);
    CHECK_EQ_INT(seq_submit(m, &r[2], "T1", NULL, "B", 1, &e), 0);
    CHECK(run_until(log_has_cond, "I S1", 2000));
    run_for(20);
    if (r[0].frames == 0) /* S1 has not been through a step: S2 is held back */
        CHECK(!log_has("S2"));
    CHECK(run_until(rec_done, &r[1], 400)); /* joined: answered mid-stream */
    CHECK(!rec_done(&r[0]));
    CHECK(r[0].frames >= 1);
    CHECK(!rec_done(&r[2])); /* sequence B waits for the worker's one sequence slot */
    CHECK(run_until(rec_done, &r[0], 3000));
    CHECK_EQ_INT(r[0].frames, 10);
    CHECK(run_until(rec_done, &r[2], 2000));
    CHECK_STR(r[2].body, "ok:T1");
    char *log = fake_log_text();
    char *s1 = strstr(log, "I S1"), *s2 = strstr(log, "I S2"), *t1 = strstr(log, "I T1");
    CHECK(s1 && s2 && t1 && s1 < s2 && s2 < t1);
    free(log);
    core_teardown();
}

int main(void)
{
    tbase_make("test_sequence");
    RUN(order_within_a_sequence_one_request_per_sequence_in_a_batch);
    RUN(idle_sequence_expires_worker_is_told_late_request_gets_410);
    RUN(session_timeout_closes_a_busy_sequence);
    RUN(next_request_goes_when_the_running_ones_client_leaves);
    RUN(a_sequence_cancel_fails_its_queued_requests_and_tells_the_worker);
    RUN(an_unknown_client_id_starts_a_sequence_a_closed_one_gets_410);
    RUN(continuous_next_request_joins_its_streaming_predecessor);
    tbase_remove();
    return tap_done();
}
