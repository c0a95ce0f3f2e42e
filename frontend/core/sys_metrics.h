/*
 * sys_metrics: TorchServe's system metrics, sampled by the frontend itself every
 * metric_time_interval seconds (TorchServe runs a Python collector, ts/metrics/system_metrics.py,
 * as often): CPUUtilization, MemoryUsed, MemoryAvailable, MemoryUtilization, DiskUsage,
 * DiskAvailable, DiskUtilization (Level=Host), and per GPU the workers may use
 * GPUMemoryUtilization, GPUMemoryUsed and GPUUtilization (Level=Host, DeviceId), from NVML
 * (nvml.h): no NVML, no GPU metrics. The values are psutil's, which TorchServe's collector reports:
 * memory from /proc/meminfo, disk from statvfs("/"), the CPU's busy share since the previous
 * sample.
 *
 * Loop thread only. The sampler is a timer on the loop (sys_metrics_start); /metrics and
 * metrics_mode=log read the last sample. The parsers are pure, for the unit tests.
 */
#ifndef TS_SYS_METRICS_H
#define TS_SYS_METRICS_H

#include <stdint.h>

#include "gpu_assign.h"

struct event_base;

struct sys_sample {
    int valid; /* a sample was taken */
    double cpu_pct;
    double mem_used_mb, mem_avail_mb, mem_pct;
    int disk_ok;
    double disk_used_gb, disk_avail_gb, disk_pct;
    int n_gpu;
    struct {
        int ok; /* NVML answered for it */
        double mem_pct, mem_used_mb, util_pct;
    } gpu[GPU_MAX];
};

/* Samples now and then every interval_s seconds, GPUs 0..n_gpu-1. */
void sys_metrics_start(struct event_base *base, int interval_s, int n_gpu);
void sys_metrics_stop(void);
/* The last sample (valid 0 before the first or when stopped). */
const struct sys_sample *sys_metrics_last(void);

/* ---- pure parts ---- */

/* The first line of /proc/stat: total and busy jiffies (busy: all but idle and iowait, as
 * psutil counts it). 0, or -1 when the text has no "cpu " line. */
int sys_metrics_parse_cpu(const char *text, uint64_t *total, uint64_t *busy);
/* CPU busy percent between two readings (0 when no time passed). */
double sys_metrics_cpu_pct(uint64_t total0, uint64_t busy0, uint64_t total1, uint64_t busy1);
/* /proc/meminfo: psutil's virtual_memory() used (total - free - buffers - cached, where cached
 * is Cached + SReclaimable; total - free if that is negative), available (MemAvailable) and
 * percent ((total - available) / total). Megabytes of 2^20 bytes. 0 or -1. */
int sys_metrics_parse_mem(const char *text, double *used_mb, double *avail_mb, double *pct);

#endif
