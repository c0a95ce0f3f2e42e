/*
 * textgen_cost.c: what a textgen step costs, measured once at load (tg_calibrate), and what
 * follows from it each step: the decode groups (tg_plan_groups) and the prompt tokens a step may
 * take while others decode (tg_prefill_budget, tg_tail_rides). backend/handlers/textgen.c says
 * where they are used.
 */
#include <time.h>

#include "handler.h"
#include "textgen_int.h"

#define CHUNK_MIN 8 /* prompt tokens a step takes at least while others decode */
/* the load-time measurement of what a step costs (tg_calibrate) */
#define CAL_ROWS 8  /* decode rows of its larger decode steps */
#define CAL_PRE 64  /* prompt tokens of its prefill step */
#define CAL_TRIES 7 /* each step runs this many times; the fastest counts */
/* a step is split between two threads when that saves at least this much of its time, in us:
 * more than the hand-over between them costs */
#define SPLIT_MIN_US 100.0

/* CPU time of this thread in us: what a step costs whether or not the machine lets it run. The
 * thread's, not the process's: with worker_threads above 1, the process's counts every thread
 * of the GEMMs (and their spinning) and makes a prompt token look dearer than it is. */
static double cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The cheapest of `tries` runs of a step over the rows in s->rows.tok/slot/pos and the groups in
 * s->groups, in us of CPU. */
static double time_step(struct tg_state *s, size_t n, size_t n_dec, const int64_t *chunks,
                        size_t nchunks, int tries, char *err, size_t errlen)
{
    double best = -1;
    for (int k = 0; k < tries; k++) {
        struct tsh_tensor *out;
        size_t nout;
        double t0 = cpu_us();
        if (tg_run_step(s, s->m, &s->rows, n, n_dec, s->groups, n_dec ? s->ngroups : 0, chunks,
                        nchunks, &out, &nout, err, errlen))
            return -1;
        double dt = cpu_us() - t0;
        tsh_tensors_free(out, nout);
        if (best < 0 || dt < best)
            best = dt;
    }
    return best;
}

/* Decode rows 0..rows-1 in slots 0..rows-1 at position pos, as one group or one group each. */
static void cal_decode(struct tg_state *s, int64_t rows, int64_t pos, int one_group)
{
    s->ngroups = one_group ? 1 : (size_t)rows;
    for (int64_t i = 0; i < rows; i++) {
        s->rows.tok[i] = '\n';
        s->rows.slot[i] = i;
        s->rows.pos[i] = pos;
        int64_t *g = s->groups + 4 * (one_group ? 0 : i);
        g[0] = one_group ? 0 : i;
        g[1] = one_group ? rows : i + 1;
        g[2] = pos + 1;
        g[3] = one_group ? rows : 1;
    }
}

/* What a step costs, measured at load (which also warms the model up), each part the cheapest
 * of CAL_TRIES runs in CPU time: on a busy machine the wall time of a long step includes the
 * time others ran. Decode steps of one row, and of CAL_ROWS rows at the context's last position
 * and at a quarter of it, in one group and in a group each, give the cost of a step, of a decode
 * row, of a slot position read and of a group (the whole of those slots is read, more than the
 * L3 caches of a common CPU hold, as the steps of a full batch read theirs from memory); a prefill
 * step of CAL_PRE tokens the cost of a prompt token. tg_plan_groups and tg_prefill_budget follow
 * from them. Measured once, not as steps run: the cost of a mixed step does not say which part took
 * the time. */
int tg_calibrate(struct tg_state *s, char *err, size_t errlen)
{
    int64_t rows = s->slots < CAL_ROWS ? s->slots : CAL_ROWS;
    int64_t pos = s->ctx_len - 1;
    int64_t pos_q = pos / 4;
    int64_t pre = s->ctx_len < CAL_PRE ? s->ctx_len : CAL_PRE;
    for (int64_t i = 0; i < rows; i++)
        if (s->has_clear && !s->cleared[i] && tg_clear_slot(s, (int)i, err, errlen))
            return -1;
    tg_grow_rows(&s->rows, (size_t)(rows > pre ? rows : pre));
    for (int64_t i = 0; i < pre; i++) {
        s->rows.tok[i] = '\n';
        s->rows.slot[i] = 0;
        s->rows.pos[i] = i;
    }
    int64_t chunk[3] = {0, 0, pre};
    s->ngroups = 0;
    double tp = time_step(s, (size_t)pre, 0, chunk, 1, CAL_TRIES, err, errlen);
    /* 1 row; rows at pos; rows at pos_q; rows at pos, a group each: by turns, so that a busy
     * moment of the machine does not fall on one of them only (the costs are their differences) */
    double t[4] = {-1, -1, -1, -1};
    for (int round = 0; round < CAL_TRIES && tp >= 0; round++)
        for (int k = 0; k < 4; k++) {
            int64_t r = k == 0 ? 1 : rows;
            cal_decode(s, r, k == 2 ? pos_q : pos, k != 3);
            double dt = time_step(s, (size_t)r, (size_t)r, NULL, 0, 1, err, errlen);
            if (dt < 0)
                return -1;
            if (t[k] < 0 || dt < t[k])
                t[k] = dt;
        }
    if (tp < 0)
        return -1;
    double width = (double)rows * (double)(pos - pos_q);
    s->pos_us = width > 0 && t[1] > t[2] ? (t[1] - t[2]) / width : 0;
    s->group_us = rows > 1 && t[3] > t[1] ? (t[3] - t[1]) / (double)(rows - 1) : 0;
    double one = s->pos_us * (double)(pos + 1); /* what a row at pos reads */
    s->row_us = rows > 1 ? (t[1] - t[0]) / (double)(rows - 1) - one : 0;
    if (s->row_us < 0)
        s->row_us = 0;
    s->step_us = t[0] - s->group_us - one - s->row_us;
    if (s->step_us < 0)
        s->step_us = 0;
    s->tok_us = tp > s->step_us ? (tp - s->step_us) / (double)pre : tp / (double)pre;
    /* a prompt token never costs more than a decode row (the same products, batched, and a
     * shorter attention): a slow prefill run on a busy machine must not shrink the budget
     * below the decode rows */
    if (s->tok_us > s->row_us + one)
        s->tok_us = s->row_us + one;
    if (s->tok_us <= 0)
        s->tok_us = 1;
    return 0;
}

/* What a decode group over rows i..j (in slot order) reads: its slot range times its longest
 * position. */
static double group_reads(const struct tg_state *s, size_t i, size_t j, int64_t t)
{
    return (double)(s->rows.slot[j] - s->rows.slot[i] + 1) * (double)t;
}

/* Cuts the decode rows, in slot order in s->rows.tok/slot/pos, into groups of neighbouring slots
 * (s->groups): a group reads its slot range up to its longest position and costs group_us of
 * its own, and the cuts are the cheapest ones (best[j]: the cheapest cost of rows 0..j, whose
 * last group starts at first[j]; O(n_dec^2), n_dec <= batchSize). One group when
 * handler.decode_groups is false. Returns what the groups cost, in us. */
double tg_plan_groups(struct tg_state *s, struct ts_ctx *ctx, size_t n_dec)
{
    s->ngroups = 0;
    if (!n_dec)
        return 0;
    for (size_t j = 0; s->split && j < n_dec; j++) {
        int64_t t = 0;
        for (size_t i = j + 1; i-- > 0;) {
            if (s->rows.pos[i] + 1 > t)
                t = s->rows.pos[i] + 1;
            double c = s->group_us + s->pos_us * group_reads(s, i, j, t) + (i ? s->best[i - 1] : 0);
            if (i == j || c < s->best[j]) {
                s->best[j] = c;
                s->first[j] = i;
            }
        }
    }
    /* the groups, found from the last row back and written in slot order */
    for (size_t end = n_dec; end > 0; end = s->split ? s->first[end - 1] : 0)
        s->ngroups++;
    double reads = 0;
    int64_t t_all = 0;
    size_t g = s->ngroups, end = n_dec;
    while (end > 0) {
        size_t i = s->split ? s->first[end - 1] : 0;
        int64_t t = 0;
        for (size_t k = i; k < end; k++)
            if (s->rows.pos[k] + 1 > t)
                t = s->rows.pos[k] + 1;
        int64_t *row = s->groups + 4 * --g;
        row[0] = s->rows.slot[i];
        row[1] = s->rows.slot[end - 1] + 1;
        row[2] = t;
        row[3] = (int64_t)(end - i);
        reads += group_reads(s, i, end - 1, t);
        if (t > t_all)
            t_all = t;
        end = i;
    }
    ts_counter_add(ctx, "decode_groups", (int64_t)s->ngroups);
    ts_counter_add(ctx, "kv_read", (int64_t)reads);
    ts_counter_add(ctx, "kv_one", (int64_t)group_reads(s, 0, n_dec - 1, t_all));
    return (double)s->ngroups * s->group_us + s->pos_us * reads;
}

/* Whether the last `tail` tokens of a prompt that go over this step's measured budget are taken
 * with the rest of it: when they cost less than a step's own cost, since the step they would
 * otherwise need costs the prompt's first token a whole step more, and the others wait for them
 * either way. Never beyond handler.max_prefill_tokens, nor with a fixed handler.prefill_chunk. */
int tg_tail_rides(const struct tg_state *s, size_t n_dec, long budget, int64_t tail)
{
    return n_dec > 0 && !s->chunk_fixed && budget + tail <= s->max_prefill &&
           (double)tail * s->tok_us <= s->step_us;
}

/* Prompt tokens this step may take, when its decode rows cost dec_us. */
long tg_prefill_budget(const struct tg_state *s, size_t n_dec, double dec_us)
{
    if (n_dec == 0)
        return s->max_prefill;
    long b = s->chunk_fixed;
    if (!b) {
        double est = (s->step_us + s->row_us * (double)n_dec + dec_us) / s->tok_us;
        b = est > (double)s->max_prefill ? s->max_prefill : (long)est;
    }
    if (b < CHUNK_MIN)
        b = CHUNK_MIN;
    return b > s->max_prefill ? s->max_prefill : b;
}

/* What the decode rows of group g cost, in us, besides the step's own cost. */
static double group_cost(const struct tg_state *s, size_t g)
{
    const int64_t *row = s->groups + 4 * g;
    return s->group_us + s->pos_us * (double)(row[1] - row[0]) * (double)row[2] +
           s->row_us * (double)row[3];
}

/* Where this step's decode groups (tg_plan_groups) are cut between two threads that run them
 * at once, each in a step of its own: the first group of the second part, where the dearer
 * part costs least, and in *rows_a the rows of the first part. s->ngroups (no cut) when the cut
 * would save less than SPLIT_MIN_US. */
size_t tg_split_groups(const struct tg_state *s, size_t *rows_a)
{
    double total = 0;
    for (size_t g = 0; g < s->ngroups; g++)
        total += group_cost(s, g);
    double a = 0, best = total;
    size_t cut = s->ngroups, rows = 0, best_rows = 0;
    for (size_t g = 0; g + 1 < s->ngroups; g++) {
        a += group_cost(s, g);
        rows += (size_t)s->groups[4 * g + 3];
        double dearer = a > total - a ? a : total - a;
        if (dearer < best) {
            best = dearer;
            cut = g + 1;
            best_rows = rows;
        }
    }
    if (total - best < SPLIT_MIN_US)
        return s->ngroups;
    *rows_a = best_rows;
    return cut;
}
