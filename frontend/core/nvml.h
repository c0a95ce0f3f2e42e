/*
 * nvml: the GPUs of the host, through NVIDIA's management library loaded at run time
 * (dlopen("libnvidia-ml.so.1"), the driver's; the frontend links neither CUDA nor NVML). A host
 * without it has no GPUs, and nothing here is an error: no GPU metrics, every model on the CPU.
 *
 * Owns the loaded library and the handles of the visible GPUs (process-wide, opened once at
 * start-up, closed at shutdown). Loop thread only. GPUs are numbered as the workers' CUDA
 * numbers them: 0..n-1 over CUDA_VISIBLE_DEVICES's list (every GPU when it is unset), which
 * is TorchServe's gpu_id; NVML's own index is the physical one.
 */
#ifndef TS_NVML_H
#define TS_NVML_H

#include <stddef.h>

/* Loads NVML and finds the GPUs CUDA_VISIBLE_DEVICES (cuda_visible, NULL when unset) lets the
 * workers see, in its order, duplicates dropped. Their number (0 without NVML or GPUs); why
 * says what happened when it is 0 (no library, no driver, none visible). */
int nvml_open(const char *cuda_visible, char *why, size_t whylen);
void nvml_close(void);
/* The visible GPUs found by nvml_open. */
int nvml_count(void);

/* GPU i's name ("NVIDIA H100 80GB HBM3") and NVML index, for the log. -1 if unknown. */
int nvml_describe(int i, char *name, size_t namelen, int *nvml_index);

/* What TorchServe reports of a GPU (nvidia-smi's utilization.gpu, utilization.memory and
 * memory.used): percent of the last sample period a kernel ran, percent of it memory was read
 * or written, and the memory in use. 0, or -1 when NVML cannot answer for GPU i. */
struct nvml_usage {
    unsigned util_gpu;
    unsigned util_mem;
    unsigned long long mem_used;  /* bytes */
    unsigned long long mem_total; /* bytes */
};
int nvml_usage(int i, struct nvml_usage *u);

#endif
