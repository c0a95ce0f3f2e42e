/*
 * oip_json_fast: the fast path of oip_json (oip_json.h), a hand-written scanner for the common
 * OIP REST request: ASCII strings without escapes, numeric, BOOL or BYTES data, no binary
 * extension, read straight into raw tensors. It never reports an error: anything else is "not
 * mine", and oip_json's jansson path, which owns the error messages, reads the body again.
 * Loop thread only.
 */
#ifndef TS_OIP_JSON_FAST_H
#define TS_OIP_JSON_FAST_H

#include <stddef.h>

#include "oip_json.h"

/* Scans copy (len bytes, NUL-terminated; NULs are written over its closing quotes) into ps, whose
 * state oip_json set up: 1 with the request's inputs, id and parameters in ps and its "outputs"
 * value (a jansson span owned by ps, or NULL) in *outputs, for oip_json to read; 0 when the body
 * is not the common shape (ps is then freed and read by the jansson path). */
int oip_json_fast_scan(struct oip_json_req *ps, char *copy, size_t len, json_t **outputs);

#endif
