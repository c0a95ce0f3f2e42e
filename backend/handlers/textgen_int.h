/*
 * textgen_int.h: what the textgen handler's files share: textgen.c (requests, steps, the
 * prefill thread's jobs), textgen_model.c (the load, the model's methods), textgen_cost.c (what a
 * step costs, measured at load, and the decode groups and prompt budget that follow from it) and
 * textgen_prefill.c (the prefill thread itself). Not an interface: backend/handlers/textgen.c
 * documents the handler.
 */
#ifndef TS_TEXTGEN_INT_H
#define TS_TEXTGEN_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "torch/torch_shim.h"

struct ts_ctx;

#define VOCAB 256 /* a token is a byte */

/* A step's rows: token, slot and position of each, grown as needed (tg_grow_rows). */
struct tg_rows {
    int64_t *tok, *slot, *pos;
    size_t cap;
};

/* handler.prefill_thread: prompts are fed by a thread of the worker's own while the batch
 * decodes. One job at a time: chunks of the oldest waiting prompts, up to max_prefill_tokens,
 * in one step() with no decode row; the main thread posts it and takes its logits once it is
 * done. The two step() calls write disjoint slots of one cache (a prompt's slot is not decoding),
 * and a decode group may read a prompt's slot while the job writes it: those rows of its product
 * are never used. state, under mu: */
enum { PF_IDLE, PF_RUN, PF_DONE, PF_QUIT };

struct tg_prefill {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
    size_t pending; /* requests of the done job not yet given its result */
    /* the job, written by the main thread while the state is PF_IDLE: a step over the first n
     * rows of *r, n_dec of them decoding in ngroups groups, and nchunks chunks. A prefill job's
     * rows and chunks are its own (rows, chunks); a decode job's are the main thread's, the part
     * of its step it gives the thread (view, and a suffix of its groups) */
    const struct tg_rows *r;
    size_t n, n_dec;
    const int64_t *groups;
    size_t ngroups;
    const int64_t *chunkp;
    size_t nchunks;
    struct tg_rows rows, view;
    int64_t *chunks; /* [slots, 3] */
    /* its result, written by the thread while the state is PF_RUN */
    struct tsh_tensor *out;
    size_t nout;
    int rc;
    uint64_t done_us; /* when it ended (ts_now_us) */
    char err[512];
};

struct tg_state {
    struct ts_ctx *ctx;
    struct tsh_model *m;
    struct tsh_model *m_pf; /* the prefill thread's, where XNNPACK runs the linears; else NULL */
    struct tsh_value *cache;
    int slots;
    int64_t ctx_len;
    unsigned char *used;    /* per slot */
    unsigned char *cleared; /* per slot: clear_slot() ran (new_cache may leave it unset) */
    int has_clear;          /* the model has clear_slot() */
    int xnnpack_linears;    /* operators on XNNPACK (handler.xnnpack); -1: not rewritten */
    int split;              /* handler.decode_groups: decode rows in the cheapest groups */
    struct tg_prefill *pf;  /* handler.prefill_thread, on a CPU; else NULL */
    double pf_end_us;       /* when its prompt job should be done (ts_now_us, measured costs) */
    int split_decode;       /* handler.split_decode: the thread runs part of a decode step */
    int pre_cores;          /* handler.prefill_cores: BLAS threads of a lone prompt's step */
    long max_new_default;
    long chunk_fixed; /* handler.prefill_chunk; 0: the measured budget */
    long max_prefill;
    /* a step costs step_us, + row_us per decode row, + group_us per decode group and pos_us per
     * slot position it reads, + tok_us per prompt token (tg_calibrate) */
    double step_us, row_us, group_us, pos_us, tok_us;
    uint64_t arrivals;
    struct tg_rows rows; /* the step's */
    int64_t *chunks;     /* [P, 3]: at most one chunk per slot */
    size_t *chunk_req;   /* request index of each chunk */
    size_t *dec_req;     /* request index of each decode row, in slot order */
    int64_t *groups;     /* [G, 4]: slot_lo, slot_hi, t, rows: at most one group per decode row */
    size_t ngroups;
    double *best;  /* tg_plan_groups: per decode row, the cheapest cost of the rows up to it */
    size_t *first; /* and the first row of its last group */
};

/* the prefill thread (textgen_prefill.c) */
int tg_pf_start(struct tg_state *s, char *err, size_t errlen);
void tg_pf_stop(struct tg_state *s);
void tg_pf_run(struct tg_prefill *pf, size_t nchunks);
void tg_pf_wait(struct tg_prefill *pf);
void tg_pf_release(struct tg_prefill *pf, size_t n);
int tg_pf_state(struct tg_prefill *pf);

/* textgen_model.c: the load and the end of the state; one step() over the first n rows of r */
int tg_load(struct ts_ctx *ctx, void **state);
void tg_state_free(struct tg_state *s);
int tg_run_step(struct tg_state *s, struct tsh_model *m, const struct tg_rows *r, size_t n,
                size_t n_dec, const int64_t *groups, size_t ngroups, const int64_t *chunks,
                size_t nchunks, struct tsh_tensor **out, size_t *nout, char *err, size_t errlen);
void tg_grow_rows(struct tg_rows *r, size_t n);
int tg_clear_slot(struct tg_state *s, int slot, char *err, size_t errlen);

/* textgen_cost.c */
int tg_calibrate(struct tg_state *s, char *err, size_t errlen);
double tg_plan_groups(struct tg_state *s, struct ts_ctx *ctx, size_t n_dec);
int tg_tail_rides(const struct tg_state *s, size_t n_dec, long budget, int64_t tail);
long tg_prefill_budget(const struct tg_state *s, size_t n_dec, double dec_us);
size_t tg_split_groups(const struct tg_state *s, size_t *rows_a);

#endif
