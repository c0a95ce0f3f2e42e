/*
 * gpu_assign: which GPU each worker gets, as TorchServe assigns them (WorkLoadManager.addThreads
 * and Model's constructor), and which GPUs the server has (CUDA_VISIBLE_DEVICES, number_of_gpu).
 *
 * Pure: no state of its own, no I/O, no logging. The one counter TorchServe shares across all
 * models is the caller's (struct server's gpu_counter); each model's plan holds its own counter
 * for deviceIds. GPUs are numbered as CUDA numbers them inside the workers: 0..n-1 over the
 * visible devices, which is also TorchServe's gpu_id.
 */
#ifndef TS_GPU_ASSIGN_H
#define TS_GPU_ASSIGN_H

#include <stddef.h>

#include "model_config.h"

#define GPU_MAX MC_MAX_DEVICE_IDS /* devices of a host we keep track of; more are not used */

/* A model's devices (TorchServe's Model: deviceType, deviceIds, numCores, its gpuCounter). */
struct gpu_plan {
    int on_gpu;       /* TorchServe's deviceType after the host check: 1 gpu, 0 cpu */
    int n_cores;      /* GPUs its workers rotate over; 0: every worker on the CPU */
    int ids[GPU_MAX]; /* deviceIds, when given and valid (used only when n_cores > 0) */
    int n_ids;        /* 0: none (or an invalid list, which TorchServe drops) */
    int counter;      /* the next index into ids */
};

/* The plan of a model on a server with number_of_gpu GPUs (after the cap at the visible ones),
 * from its model-config.yaml's deviceType (MC_DEVICE_*) and deviceIds, as TorchServe's Model
 * computes it: deviceType defaults to gpu when the server has GPUs; gpu
 * on a server without any is the CPU; deviceIds (n_ids of them, n_ids < 0 for none) are what
 * the workers rotate over on a GPU, and a list with an id outside 0..number_of_gpu-1 is dropped
 * whole. What
 * differs from the model's config goes into note (for the caller's log; "" when nothing). */
void gpu_plan_init(struct gpu_plan *p, int device_type, const int *ids, int n_ids,
                   int number_of_gpu, char *note, size_t notelen);

/* The gpu_id of the model's next worker, -1 for the CPU. With deviceIds, the model's own
 * counter walks them in order from the first; otherwise the server's counter, shared by every
 * model, is advanced first, TorchServe's accumulateAndGet(++prev % n): on two GPUs the first
 * worker the server starts gets GPU 1. */
int gpu_plan_next(struct gpu_plan *p, int *server_counter);

/* CUDA_VISIBLE_DEVICES as CUDA reads it: comma-separated entries, each a device index or a
 * "GPU-"/"MIG-" UUID (or its prefix); the list ends at the first entry that is neither (so
 * "-1" hides every device) and an empty value hides them all. NULL: every device. Fills
 * entries[] with pointers into a copy kept in buf (bufsize bytes), indices as their digits;
 * returns the number of entries, or -1 when the variable is unset. Duplicates are kept: the
 * caller drops those it has seen (TorchServe warns and removes them). */
int gpu_visible_parse(const char *env, char *buf, size_t bufsize, const char **entries, int max);

#endif
