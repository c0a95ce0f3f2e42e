/*
 * metric_line: TorchServe's backend metric lines, as its Python worker prints them on stdout and
 * its frontend reads them (ts/metrics/caching_metric.py, Metric.java):
 *
 *   [METRICS]NAME.UNIT:VALUE|#DIM:VAL,DIM:VAL|#type:TYPE|#hostname:HOST,TIMESTAMP[,REQUEST_IDS]
 *
 * The dimension list may be empty ("|#|#type..."), "|#type:TYPE" may be absent (a gauge then).
 * Our `ts` package writes them from context.metrics; a handler that prints such a line itself
 * reports a metric as in TorchServe. metric_line_parse reads the text after "[METRICS]" and
 * refuses what /metrics could not carry as it is: a NAME outside [A-Za-z_:][A-Za-z0-9_:]*, a
 * UNIT outside [A-Za-z0-9_%/.-]*, a dimension name outside [A-Za-z_][A-Za-z0-9_]*, a value that
 * is not a finite number, more than METRIC_LINE_DIMS_MAX dimensions, or fields over their
 * maximum lengths. A dimension value may hold any byte but '|', ',' and control bytes.
 *
 * Pure: no global state, no allocation; the result points into the line (zero copy).
 */
#ifndef TS_METRIC_LINE_H
#define TS_METRIC_LINE_H

#include <stddef.h>

#include "otf.h"

#define METRIC_LINE_PREFIX "[METRICS]"
#define METRIC_LINE_DIMS_MAX 8
#define METRIC_LINE_DIM_NAME_MAX 64
#define METRIC_LINE_DIM_VALUE_MAX 256

struct metric_line {
    char kind; /* 'c' counter, 'g' gauge, 'h' histogram */
    struct otf_str name, unit;
    double value;
    size_t n_dims;
    struct otf_str dim_name[METRIC_LINE_DIMS_MAX], dim_value[METRIC_LINE_DIMS_MAX];
    struct otf_str host, timestamp, request_ids; /* request_ids: len 0 for none */
};

/* Parses [p, p+len) (the text after METRIC_LINE_PREFIX, without the newline). 0, or -1 with
 * why (a short reason naming the field). */
int metric_line_parse(const char *p, size_t len, struct metric_line *out, char *why, size_t n);

#endif
