/*
 * oip_wire: Open Inference Protocol tensors between the frontend and a worker.
 *
 * The frontend parses and validates an OIP request (REST JSON, Triton's binary extension, or
 * gRPC) and hands the worker one normalized payload, the job parameter "body" with content
 * type OIP_WIRE_CTYPE. A worker that answers in tensors uses the same layout back:
 *
 *   bytes 0..3    "OIP1"
 *   bytes 4..7    N, uint32 little-endian: length of the JSON header
 *   N bytes       JSON header (UTF-8)
 *   the rest      each tensor's raw data, back to back in header order: row-major,
 *                 little-endian, BOOL one byte per element, BYTES as Triton lays it out
 *                 (uint32 LE length + bytes, per element)
 *
 * Request header:  {"id"?: str, "parameters"?: {...}, "outputs"?: [str],
 *                   "inputs": [{"name", "datatype", "shape": [int], "size": bytes,
 *                               "parameters"?: {...}}]}
 * Response header: {"parameters"?: {...},
 *                   "outputs": [{"name", "datatype", "shape": [int], "size": bytes}]}
 *
 * Text handlers (identity_text, char_lm) are not sent this: the frontend maps an OIP text
 * request to the JSON body those handlers read ({"text", "prompt", "max_new_tokens", ...}).
 *
 * Pure: no globals, no logging; any thread. Tensors point into the caller's buffer.
 */
#ifndef TS_OIP_WIRE_H
#define TS_OIP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct json_t json_t;

#define OIP_WIRE_CTYPE "application/x-ts-oip"
/* A request for the model's tensor metadata (empty body): the handler answers JSON
 * {"inputs": [{"name","datatype","shape"}], "outputs": [...]} as far as it knows them. */
#define OIP_WIRE_META_CTYPE "application/x-ts-oip-metadata"
#define OIP_MAX_DIMS 8
#define OIP_MAX_TENSORS 64

enum oip_dtype {
    OIP_BOOL = 0,
    OIP_UINT8,
    OIP_UINT16,
    OIP_UINT32,
    OIP_UINT64,
    OIP_INT8,
    OIP_INT16,
    OIP_INT32,
    OIP_INT64,
    OIP_FP16,
    OIP_FP32,
    OIP_FP64,
    OIP_BF16,
    OIP_BYTES,
    OIP_DTYPE_COUNT
};

struct oip_tensor {
    const char *name; /* points into the header JSON (valid while it lives) */
    int dtype;        /* enum oip_dtype */
    int64_t shape[OIP_MAX_DIMS];
    int ndim;
    const uint8_t *data;
    size_t nbytes;
    json_t *parameters; /* borrowed, may be NULL */
};

/* -1 for an unknown name ("FP32" -> OIP_FP32; case-sensitive, as the spec writes them). */
int oip_dtype_from_name(const char *s);
const char *oip_dtype_name(int dtype);
/* Bytes per element; 0 for BYTES (variable) and unknown dtypes. */
size_t oip_dtype_size(int dtype);

/* Number of elements of a shape (1 for ndim 0); -1 if a dimension is negative or the product
 * overflows. */
int64_t oip_numel(const int64_t *shape, int ndim);
/* "[2,64]": a shape as error messages print it (truncated to n). */
void oip_shape_str(char *out, size_t n, const int64_t *shape, int ndim);
/* The n-byte (n <= 8) little-endian unsigned integer at p. */
uint64_t oip_rd_le(const uint8_t *p, size_t n);

/* Checks that nbytes is what a tensor of this dtype and shape holds (for BYTES: that the
 * length-prefixed elements are exactly numel and fill nbytes). 0, or -1 with err set
 * ("expected 256 bytes for FP32 [1,64], got 255"). */
int oip_check_data(int dtype, const int64_t *shape, int ndim, const uint8_t *data, size_t nbytes,
                   char *err, size_t errlen);

/* Next BYTES element: 1 with *s and *n set, 0 at the end, -1 if truncated. */
int oip_bytes_next(const uint8_t **p, const uint8_t *end, const uint8_t **s, uint32_t *n);

/* IEEE half and bfloat16 <-> float. */
float oip_half_to_float(uint16_t h);
uint16_t oip_float_to_half(float f);
float oip_bf16_to_float(uint16_t h);
uint16_t oip_float_to_bf16(float f);

/* Appends "OIP1", the header length and the header. Raw data goes after it (buf_put). */
void oip_wire_put_header(struct buf *b, const char *json, size_t len);
/* Splits a payload. 0, or -1 with err set. */
int oip_wire_split(const void *p, size_t len, const char **json, size_t *jlen, const uint8_t **raw,
                   size_t *rawlen, char *err, size_t errlen);

/* Reads header[key] (an array of tensor descriptions) and cuts raw into their data.
 * out gets up to max tensors (names and parameters borrowed from header). 0 with *n set, or -1
 * with err naming the field ("inputs[1].size: ..."). */
int oip_wire_tensors(json_t *header, const char *key, const uint8_t *raw, size_t rawlen,
                     struct oip_tensor *out, size_t max, size_t *n, char *err, size_t errlen);

/* The fast path of json_loadb + oip_wire_tensors for the headers this project writes: copies
 * the header into scratch (jlen + 1 bytes; names then point into it) and reads "id" (ignored),
 * key (tensors {"name","datatype","shape","size"}, no parameters) and, when outs is not NULL,
 * "outputs" (up to OIP_MAX_TENSORS plain strings: the outputs a request names; *nouts of them).
 * 1 with out, *n (and *nouts) set; 0 for a header of any other form or with any error: the
 * caller then takes the jansson path, which gives the error messages. */
int oip_wire_scan(const char *json, size_t jlen, char *scratch, const char *key, const uint8_t *raw,
                  size_t rawlen, struct oip_tensor *out, size_t max, size_t *n, const char **outs,
                  size_t *nouts);

/* Appends s as a JSON string (quoted, escaped; the bytes are taken as UTF-8). */
void oip_wire_put_jstr(struct buf *b, const char *s, size_t n);
/* Appends a tensor description {"name","datatype","shape","size"} as JSON text (first: no
 * leading comma): headers are written by hand, jansson's DOM costs more than the data. */
void oip_wire_put_desc(struct buf *b, int first, const char *name, int dtype, const int64_t *shape,
                       int ndim, size_t nbytes);
/* Appends a tensor description {"name","datatype","shape","size"} to a JSON array. */
void oip_wire_describe(json_t *arr, const char *name, int dtype, const int64_t *shape, int ndim,
                       size_t nbytes);

#endif
