/*
 * metrics: the histograms' bucket bounds (see metrics.h).
 */
#include "metrics.h"

const double hist_ms_bounds[HIST_BUCKETS - 1] = {0.1, 0.25, 0.5, 1,   2.5,  5,    10,   25,
                                                 50,  100,  250, 500, 1000, 2500, 10000};
const double hist_size_bounds[HIST_BUCKETS - 1] = {1,  2,  3,  4,   6,   8,   12,  16,
                                                   24, 32, 64, 128, 256, 512, 1024};
