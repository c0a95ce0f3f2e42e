/*
 * fuzz_oip: the check the OIP targets (oip_json, grpc_pb) share.
 */
#ifndef TS_FUZZ_OIP_H
#define TS_FUZZ_OIP_H

#include "fuzz.h"
#include "oip/oip_req.h"
#include "oip_wire.h"

/* Every tensor of an accepted OIP request holds bytes that match its datatype and shape (what
 * the worker is promised); a refused one says why. */
static inline void fuzz_check_oip_request(int accepted, const struct oip_request *r,
                                          const char *err)
{
    if (!accepted) {
        FUZZ_CHECK(err[0]);
        return;
    }
    for (size_t i = 0; i < r->n_inputs; i++) {
        const struct oip_tensor *t = &r->inputs[i];
        char why[256];
        FUZZ_CHECK(t->name && t->data);
        if (oip_check_data(t->dtype, t->shape, t->ndim, t->data, t->nbytes, why, sizeof(why))) {
            fprintf(stderr, "inputs[%zu]: %s\n", i, why);
            FUZZ_CHECK(!"an accepted tensor does not match its datatype and shape");
        }
    }
}

#endif
