/*
 * oip_json: reads an OIP request in its REST encoding (JSON, and Triton's binary data extension)
 * into a struct oip_request. Loop thread only. The request points into the parser's state (the
 * body's copy, the JSON tree, the converted tensors): it is valid until oip_json_free.
 */
#ifndef TS_OIP_JSON_H
#define TS_OIP_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "oip/oip_req.h"
#include "util.h"

struct oip_json_req {
    struct oip_request r;
    int binary_all;     /* parameters.binary_data_output: every output in binary */
    json_t *binary_out; /* names of the outputs asked for in binary (owned), or NULL */
    /* the parser's state */
    struct buf raw; /* JSON data converted to raw tensors */
    size_t off[OIP_MAX_TENSORS];
    int from_raw[OIP_MAX_TENSORS];    /* data is in raw (else in the binary section) */
    json_t *own[OIP_MAX_TENSORS + 2]; /* fast path: parameters / outputs parsed by jansson */
    int n_own;
    json_t *root;
    char *copy;
};

/* body: len bytes, of which the first jlen are JSON and the rest the binary section (binary:
 * the request said so in Inference-Header-Content-Length). generate_route: /generate accepts
 * {"text_input"}. 0, or -1 with err naming the field (answer 400). Free with oip_json_free
 * either way. */
int oip_json_parse(struct oip_json_req *q, const uint8_t *body, size_t len, size_t jlen, int binary,
                   int generate_route, char *err, size_t errlen);
void oip_json_free(struct oip_json_req *q);

#endif
