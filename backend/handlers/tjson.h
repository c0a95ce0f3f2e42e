/*
 * tjson: request bodies to float32 tensors and tensors back to JSON, for the torchscript
 * handler. Input: JSON ({"data": ...}, {"instances": ...}, {"inputs": ...}, a bare nested list,
 * or a bare number) or raw little-endian float32. Errors are client-facing sentences naming the
 * bad element by its path ("data[2]: expected a number, got string").
 * Pure: no globals, no logging. Outputs are malloc'd; free with tjson_input_free.
 */
#ifndef TS_TJSON_H
#define TS_TJSON_H

#include <stddef.h>
#include <stdint.h>

#include "torch/torch_shim.h"
#include "util.h"

struct tjson_input {
    float *data;
    int64_t shape[TSH_MAX_DIMS];
    int ndim;
};

/* 0, or -1 with err set. max_dims bounds the nesting depth. */
int tjson_parse_json(const char *body, size_t len, int max_dims, struct tjson_input *out, char *err,
                     size_t errlen);
/* Raw float32 with the shape given (shape may be NULL with ndim 0: a flat vector). */
int tjson_parse_raw(const void *body, size_t len, const int64_t *shape, int ndim,
                    struct tjson_input *out, char *err, size_t errlen);
/* "2,64" or "[2, 64]" -> shape. 0 or -1 with err set. */
int tjson_parse_shape(const char *spec, int64_t *shape, int *ndim, char *err, size_t errlen);
void tjson_input_free(struct tjson_input *in);

/* "[2,64]" into out. */
void tjson_format_shape(char *out, size_t n, const int64_t *shape, int ndim);

/* Appends rows [row, row + nrows) of t (along dim 0) as JSON: a list of rows, or, with single,
 * the one row itself. Floats print with enough digits to round-trip (float32: %.9g). */
void tjson_write_rows(struct buf *b, const struct tsh_tensor *t, int64_t row, int64_t nrows,
                      int single);
/* The whole tensor as JSON. */
void tjson_write_tensor(struct buf *b, const struct tsh_tensor *t);

#endif
