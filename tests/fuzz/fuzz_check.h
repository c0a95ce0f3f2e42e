/*
 * fuzz_check: FUZZ_CHECK and the entry point every target defines; fuzz.h includes it, and a
 * target that cannot include fuzz.h (py_json: common/util.h's names clash) includes this alone.
 */
#ifndef TS_FUZZ_CHECK_H
#define TS_FUZZ_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
