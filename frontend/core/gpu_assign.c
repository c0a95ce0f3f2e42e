/*
 * gpu_assign: TorchServe's device assignment, as arithmetic (gpu_assign.h).
 *
 * TorchServe decides a model's devices once, when the model is made (Model's constructor):
 * deviceType, the deviceIds it keeps, and numCores, the number of GPUs its workers rotate
 * over. Each new worker then takes the next gpu_id (WorkLoadManager.addThreads): from the
 * model's own counter over its deviceIds, or from one counter of the whole server, so that the
 * workers of all models spread over the GPUs together. A respawned worker keeps its gpu_id
 * (TorchServe retries the same WorkerThread); that is the caller's, which calls
 * gpu_plan_next() once per worker it creates.
 */
#include "gpu_assign.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void gpu_plan_init(struct gpu_plan *p, int device_type, const int *ids, int n_ids,
                   int number_of_gpu, char *note, size_t notelen)
{
    memset(p, 0, sizeof(*p));
    note[0] = '\0';
    if (number_of_gpu < 0)
        number_of_gpu = 0;
    p->on_gpu = number_of_gpu > 0 && device_type != MC_DEVICE_CPU;
    if (device_type == MC_DEVICE_GPU && number_of_gpu == 0)
        snprintf(note, notelen,
                 "deviceType: gpu, but this server has no GPU (number_of_gpu=0, or none "
                 "visible): its workers run on the CPU, as TorchServe's do");
    if (n_ids > 0) {
        int bad = -1;
        for (int i = 0; i < n_ids && bad < 0; i++)
            if (ids[i] < 0 || ids[i] >= number_of_gpu || i >= GPU_MAX)
                bad = i;
        if (bad >= 0) {
            size_t used = strlen(note);
            snprintf(note + used, notelen - used,
                     "%sdeviceIds: invalid deviceId %d (this server has %d GPU(s)): the list is "
                     "ignored, as TorchServe ignores it",
                     used ? "; " : "", ids[bad], number_of_gpu);
        } else {
            /* kept for describe even on the CPU, as TorchServe keeps them */
            memcpy(p->ids, ids, sizeof(int) * (size_t)n_ids);
            p->n_ids = n_ids;
        }
    }
    if (p->on_gpu)
        p->n_cores = p->n_ids > 0 ? p->n_ids : number_of_gpu;
}

int gpu_plan_next(struct gpu_plan *p, int *server_counter)
{
    if (p->n_cores <= 0)
        return -1;
    if (p->n_ids > 0) {
        int id = p->ids[p->counter];
        p->counter = (p->counter + 1) % p->n_cores;
        return id;
    }
    *server_counter = (*server_counter + 1) % p->n_cores;
    return *server_counter;
}

/* An entry CUDA takes: digits, or a GPU-/MIG- UUID (hex digits and dashes after the tag). */
static int valid_entry(const char *e)
{
    if (!*e)
        return 0;
    if (!strncmp(e, "GPU-", 4) || !strncmp(e, "MIG-", 4)) {
        for (const char *c = e + 4; *c; c++)
            if (!isxdigit((unsigned char)*c) && *c != '-' && *c != '/')
                return 0;
        return e[4] != '\0';
    }
    for (const char *c = e; *c; c++)
        if (!isdigit((unsigned char)*c))
            return 0;
    return 1;
}

int gpu_visible_parse(const char *env, char *buf, size_t bufsize, const char **entries, int max)
{
    if (!env)
        return -1;
    snprintf(buf, bufsize, "%s", env);
    int n = 0;
    /* not strtok, which would merge ",," into one separator: CUDA stops at an empty entry */
    char *p = buf;
    while (p && n < max) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        while (isspace((unsigned char)*p))
            p++;
        char *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (!valid_entry(p))
            break;
        entries[n++] = p;
        p = comma ? comma + 1 : NULL;
    }
    return n;
}
