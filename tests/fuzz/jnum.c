/*
 * jnum: the per-number hot paths (common/jnum.c), a differential target against the libraries
 * they stand in for. jnum_scan_f32 on any bytes must either give up or read a JSON number to
 * exactly the float that jansson's value of that token gives; jnum_f32 on any float bits must
 * either decline or print exactly what printf's "%.9g" prints; jnum_i64/u64 match "%lld"/"%llu".
 */
#include <jansson.h>
#include <math.h>

#include "fuzz.h"
#include "jnum.h"

static void scan(const char *p, const char *end)
{
    const char *next = NULL;
    float v;
    if (jnum_scan_f32(p, end, &next, &v))
        return;
    FUZZ_CHECK(next > p && next <= end);
    /* the token alone, as jansson reads a bare value */
    json_error_t je;
    json_t *j = json_loadb(p, (size_t)(next - p), JSON_DECODE_ANY, &je);
    FUZZ_CHECK(j && json_is_number(j));
    float ref = (float)json_number_value(j);
    json_decref(j);
    FUZZ_CHECK(memcmp(&v, &ref, sizeof(v)) == 0 || (isnan(v) && isnan(ref)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    scan(s, s + size);
    /* and from every position where a number may start, as inside a list */
    for (size_t i = 1; i < size && i < 64; i++)
        if (s[i - 1] == ',' || s[i - 1] == '[' || s[i - 1] == ' ')
            scan(s + i, s + size);

    if (size >= 4) {
        float f;
        memcpy(&f, data, 4);
        char mine[JNUM_MAX + 1], ref[64];
        size_t n = jnum_f32(mine, f);
        FUZZ_CHECK(n <= JNUM_MAX);
        if (n) {
            mine[n] = '\0';
            snprintf(ref, sizeof(ref), "%.9g", f);
            if (strcmp(mine, ref)) {
                fprintf(stderr, "jnum_f32: '%s', printf: '%s'\n", mine, ref);
                FUZZ_CHECK(!"jnum_f32 differs from %.9g");
            }
        }
    }
    if (size >= 8) {
        int64_t v;
        memcpy(&v, data + size - 8, 8);
        char mine[JNUM_MAX + 1], ref[32];
        size_t n = jnum_i64(mine, v);
        mine[n] = '\0';
        snprintf(ref, sizeof(ref), "%lld", (long long)v);
        FUZZ_CHECK(!strcmp(mine, ref));
        n = jnum_u64(mine, (uint64_t)v);
        mine[n] = '\0';
        snprintf(ref, sizeof(ref), "%llu", (unsigned long long)v);
        FUZZ_CHECK(!strcmp(mine, ref));
    }
    return 0;
}
