/*
 * jnum_bench: nanoseconds per number of jnum_scan_f32 (common/jnum.c), the scan that reads the
 * floats of a JSON body in the worker (TorchServe's {"data": [...]}) and in the frontend (OIP
 * REST), for three spellings of the same random values in [-1, 1):
 *   %.4f   four decimals, as in the mlp's sample ("-0.3523");
 *   %.9g   float32's round-trip digits ("-0.352312505");
 *   %.17g  a float32 printed as a double by Python's json ("-0.35231250524520874").
 * 4096 numbers separated by ", " as in a list, read 200 times; the best pass. Build it against
 * any version of jnum.c for an A/B:
 *
 *   gcc -O2 -Icommon -o /tmp/jnum_bench scripts/bench/jnum_bench.c common/jnum.c -lm
 *   /tmp/jnum_bench [FORMAT]          (one of the three alone, e.g. under callgrind: the
 *                                      instructions per number are its total / 819200)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jnum.h"

#define COUNT 4096
#define PASSES 200

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void run(const char *fmt, int as_float)
{
    static char buf[COUNT * 32];
    static float out[COUNT];
    char *p = buf;
    unsigned x = 1;
    for (int i = 0; i < COUNT; i++) {
        x = x * 1103515245u + 12345u;
        double v = ((int)(x >> 8) % 2000000 - 1000000) / 1e6;
        p += sprintf(p, fmt, as_float ? (double)(float)v : v);
        *p++ = ',';
        *p++ = ' ';
    }
    const char *end = p;
    double best = 1e30;
    for (int r = 0; r < PASSES; r++) {
        double t0 = now_ns();
        const char *q = buf;
        for (int i = 0; i < COUNT; i++) {
            if (jnum_scan_f32(q, end, &q, &out[i])) {
                fprintf(stderr, "jnum_bench: gave up at number %d\n", i);
                exit(1);
            }
            q += 2;
        }
        double ns = (now_ns() - t0) / COUNT;
        if (ns < best)
            best = ns;
    }
    printf("%-6s %5.1f ns/number (%.1f bytes/number)\n", fmt, best, (double)(end - buf) / COUNT);
}

int main(int argc, char **argv)
{
    static const char *const fmts[] = {"%.4f", "%.9g", "%.17g"};
    for (int i = 0; i < 3; i++)
        if (argc < 2 || !strcmp(argv[1], fmts[i]))
            run(fmts[i], i > 0);
    return 0;
}
