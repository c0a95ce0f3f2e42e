/*
 * nvml: NVIDIA's management library, dlopened (nvml.h).
 *
 * The few functions used are declared here with the types of nvml.h, which the driver has kept
 * since NVML's first versions (the _v2 names since driver 325); nothing of CUDA's or NVML's
 * headers is needed to build, and a host without the driver runs without GPUs. TorchServe asks
 * nvidia-smi the same questions (index, name, utilization.gpu, utilization.memory,
 * memory.used).
 */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_assign.h"

typedef struct nvml_device *nvml_device_t;
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_utilization {
    unsigned int gpu, memory;
};

#define NVML_SUCCESS 0
#define NVML_UUID_LEN 96
#define NVML_NAME_LEN 96

static struct {
    void *dl;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned int *);
    int (*by_index)(unsigned int, nvml_device_t *);
    int (*uuid)(nvml_device_t, char *, unsigned int);
    int (*by_uuid)(const char *, nvml_device_t *);
    int (*index)(nvml_device_t, unsigned int *);
    int (*name)(nvml_device_t, char *, unsigned int);
    int (*memory)(nvml_device_t, struct nvml_memory *);
    int (*utilization)(nvml_device_t, struct nvml_utilization *);
    const char *(*error)(int);
    nvml_device_t dev[GPU_MAX];
    int n;
} nv;

static int sym(void **fn, const char *name)
{
    *fn = dlsym(nv.dl, name);
    return *fn ? 0 : -1;
}

static const char *err_text(int rc)
{
    static char b[32];
    if (nv.error)
        return nv.error(rc);
    snprintf(b, sizeof(b), "NVML error %d", rc);
    return b;
}

/* The device an entry of CUDA_VISIBLE_DEVICES names, or NULL: an index, a whole UUID, or a
 * UUID prefix that only one GPU has (CUDA takes unique prefixes). */
static nvml_device_t find_device(const char *entry, unsigned int total)
{
    nvml_device_t d = NULL;
    if (entry[0] >= '0' && entry[0] <= '9') {
        unsigned long i = strtoul(entry, NULL, 10);
        return i < total && nv.by_index((unsigned int)i, &d) == NVML_SUCCESS ? d : NULL;
    }
    if (nv.by_uuid(entry, &d) == NVML_SUCCESS)
        return d;
    nvml_device_t found = NULL;
    for (unsigned int i = 0; i < total; i++) {
        char uuid[NVML_UUID_LEN];
        if (nv.by_index(i, &d) != NVML_SUCCESS || nv.uuid(d, uuid, sizeof(uuid)) != NVML_SUCCESS)
            continue;
        if (!strncmp(uuid, entry, strlen(entry))) {
            if (found)
                return NULL; /* ambiguous */
            found = d;
        }
    }
    return found;
}

int nvml_open(const char *cuda_visible, char *why, size_t whylen)
{
    why[0] = '\0';
    nv.n = 0;
    nv.dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.dl) {
        snprintf(why, whylen, "no NVIDIA driver library (%s)", dlerror());
        return 0;
    }
    if (sym((void **)&nv.init, "nvmlInit_v2") || sym((void **)&nv.shutdown, "nvmlShutdown") ||
        sym((void **)&nv.count, "nvmlDeviceGetCount_v2") ||
        sym((void **)&nv.by_index, "nvmlDeviceGetHandleByIndex_v2") ||
        sym((void **)&nv.uuid, "nvmlDeviceGetUUID") ||
        sym((void **)&nv.by_uuid, "nvmlDeviceGetHandleByUUID") ||
        sym((void **)&nv.index, "nvmlDeviceGetIndex") ||
        sym((void **)&nv.name, "nvmlDeviceGetName") ||
        sym((void **)&nv.memory, "nvmlDeviceGetMemoryInfo") ||
        sym((void **)&nv.utilization, "nvmlDeviceGetUtilizationRates")) {
        snprintf(why, whylen, "libnvidia-ml.so.1 lacks a function NVML has had since 2013");
        dlclose(nv.dl);
        nv.dl = NULL;
        return 0;
    }
    sym((void **)&nv.error, "nvmlErrorString");
    int rc = nv.init();
    if (rc != NVML_SUCCESS) {
        snprintf(why, whylen, "NVML: %s", err_text(rc));
        dlclose(nv.dl);
        nv.dl = NULL;
        return 0;
    }
    unsigned int total = 0;
    if ((rc = nv.count(&total)) != NVML_SUCCESS) {
        snprintf(why, whylen, "NVML: %s", err_text(rc));
        total = 0;
    }
    char buf[1024];
    const char *entries[GPU_MAX];
    int ne = gpu_visible_parse(cuda_visible, buf, sizeof(buf), entries, GPU_MAX);
    if (ne < 0) { /* unset: every GPU, in NVML's order (CUDA's, for PCI bus order) */
        for (unsigned int i = 0; i < total && nv.n < GPU_MAX; i++)
            if (nv.by_index(i, &nv.dev[nv.n]) == NVML_SUCCESS)
                nv.n++;
    } else {
        for (int e = 0; e < ne && nv.n < GPU_MAX; e++) {
            nvml_device_t d = find_device(entries[e], total);
            if (!d)
                break; /* CUDA's list ends at the first entry it cannot use */
            int dup = 0;
            for (int k = 0; k < nv.n; k++)
                dup |= nv.dev[k] == d;
            if (!dup)
                nv.dev[nv.n++] = d;
        }
    }
    if (nv.n == 0 && !why[0])
        snprintf(why, whylen, "%u GPU(s) on the host, none visible%s%s%s", total,
                 cuda_visible ? " (CUDA_VISIBLE_DEVICES=" : "", cuda_visible ? cuda_visible : "",
                 cuda_visible ? ")" : "");
    return nv.n;
}

void nvml_close(void)
{
    if (!nv.dl)
        return;
    nv.shutdown();
    dlclose(nv.dl);
    memset(&nv, 0, sizeof(nv));
}

int nvml_count(void)
{
    return nv.n;
}

int nvml_describe(int i, char *name, size_t namelen, int *nvml_index)
{
    if (!nv.dl || i < 0 || i >= nv.n)
        return -1;
    char b[NVML_NAME_LEN];
    if (nv.name(nv.dev[i], b, sizeof(b)) != NVML_SUCCESS)
        snprintf(b, sizeof(b), "?");
    snprintf(name, namelen, "%s", b);
    unsigned int idx;
    *nvml_index = nv.index(nv.dev[i], &idx) == NVML_SUCCESS ? (int)idx : -1;
    return 0;
}

int nvml_usage(int i, struct nvml_usage *u)
{
    memset(u, 0, sizeof(*u));
    if (!nv.dl || i < 0 || i >= nv.n)
        return -1;
    struct nvml_memory m;
    struct nvml_utilization ut;
    if (nv.memory(nv.dev[i], &m) != NVML_SUCCESS)
        return -1;
    u->mem_used = m.used;
    u->mem_total = m.total;
    /* a MIG device has no utilization of its own: memory only */
    if (nv.utilization(nv.dev[i], &ut) == NVML_SUCCESS) {
        u->util_gpu = ut.gpu;
        u->util_mem = ut.memory;
    }
    return 0;
}
