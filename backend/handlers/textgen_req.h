/*
 * textgen_req: what a text generation request asks for (the textgen handler's requests), and
 * the choice of each next token. Pure: no ctx, no I/O; every string is copied.
 *
 * A request body is either the prompt as plain text, or a JSON object: the text body the
 * frontend makes of OIP generate / infer requests and of the OpenAI API (frontend/oip/oip_req.h,
 * docs/openai.md):
 *     {"prompt" (or "text"): str, "max_new_tokens" (or "max_tokens"): int,
 *      "temperature": num, "top_p": num, "seed": int, "stop": str | [str],
 *      "parameters": {the same keys}}
 * A key at the top wins over the same key in "parameters".
 */
#ifndef TS_TEXTGEN_REQ_H
#define TS_TEXTGEN_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "textstop.h"

#define TEXTGEN_MAX_NEW_LIMIT 1000000L

struct textgen_params {
    char *prompt; /* malloc'd, NUL-terminated */
    size_t plen;
    long max_new;       /* -1: not given */
    double temperature; /* 0: greedy (the default) */
    double top_p;       /* 1: the whole distribution (the default) */
    int has_seed;
    uint64_t seed;
    char stop[TEXTSTOP_MAX][TEXTSTOP_MAX_LEN];
    size_t stop_len[TEXTSTOP_MAX];
    size_t nstop;
};

/* Reads body (len bytes, content type ctype, may be ""). max_new_param: the request's
 * max_new_tokens query parameter, or NULL. 0, or -1 with err naming the field (a 400). */
int textgen_req_parse(const char *body, size_t len, const char *ctype, const char *max_new_param,
                      struct textgen_params *p, char *err, size_t errlen);
void textgen_params_free(struct textgen_params *p);

/* The next token of n logits: the first argmax when temperature <= 0; else a draw, with the
 * generator *rng (splitmix64), from softmax(logits / temperature) cut to the smallest set of the
 * most likely tokens whose probabilities reach top_p. */
int64_t textgen_sample(const float *logits, size_t n, double temperature, double top_p,
                       uint64_t *rng);
/* The first argmax of n logits, and the gap between the two largest (0 when n < 2). */
int64_t textgen_argmax(const float *logits, size_t n, float *gap);

#endif
