/*
 * torch_shim: the only door to libtorch. A C API over TorchScript modules, implemented in C++
 * (torch_shim.cpp; the device in torch_device.cpp, CUDA graphs in torch_graph.cpp); no file
 * outside backend/torch/ includes a libtorch header.
 *
 * The shim owns the device. A worker serves on the device the frontend assigned it (gpu_id,
 * the load frame's; -1 the CPU): tsh_load() puts the module there, tsh_forward() takes host
 * buffers and gives host buffers back whatever the device, moving them through pinned staging
 * buffers on the worker's own CUDA stream. The same source builds against a CPU libtorch:
 * CUDA is asked for at run time, never hidden behind #ifdefs.
 *
 * Threading: the worker is single-threaded; call everything from one thread. tsh_init() runs
 * once, before the first tsh_load().
 * Errors: functions return 0 / a pointer on success, and -1 / NULL with *err set to a malloc'd
 * message (first line of the libtorch error, no C++ backtrace) that the caller frees. No C++
 * exception ever crosses this interface.
 * Memory: inputs are borrowed for the duration of tsh_forward (wrapped zero-copy; they must be
 * contiguous row-major buffers of their dtype). Outputs are malloc'd by the shim and freed with
 * tsh_tensors_free().
 */
#ifndef TS_TORCH_SHIM_H
#define TS_TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSH_MAX_DIMS 8

enum tsh_dtype {
    TSH_FLOAT32 = 0,
    TSH_FLOAT64,
    TSH_FLOAT16,
    TSH_BFLOAT16,
    TSH_INT64,
    TSH_INT32,
    TSH_INT16,
    TSH_INT8,
    TSH_UINT8,
    TSH_BOOL,
    TSH_DTYPE_COUNT
};

struct tsh_tensor {
    int dtype; /* enum tsh_dtype */
    int64_t shape[TSH_MAX_DIMS];
    int ndim;
    void *data;
    size_t nbytes;
};

struct tsh_model;

/* Bytes per element, 0 for an unknown dtype. */
size_t tsh_dtype_size(int dtype);
/* "float32", "int64", ... ("?" for an unknown dtype). */
const char *tsh_dtype_name(int dtype);
/* Number of elements of a shape (1 for ndim 0); -1 if a size is negative or the product does
 * not fit in int64_t (shapes come from clients: X-Shape: 4611686018427387905,64 wrapped). */
static inline int64_t tsh_numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n))
            return -1;
    return n;
}

/* Thread counts (<= 0 leaves libtorch's default) and the profiling executor off. */
int tsh_init(int intra_threads, char **err);

/* The threads the BLAS under libtorch's CPU products runs on, where it can be told while the
 * process runs: OpenBLAS (openblas_set_num_threads, looked up in the process). Its pthread
 * build has one count for the whole process, so call it only while no other thread computes.
 * Back to 1, its pool is stopped (blas_thread_shutdown_, where OpenBLAS exports it): idle, its
 * threads would spin for their next job for about 0.1 s, on the cores the worker's other
 * threads compute on. n <= 0 changes nothing. Returns the count it had, or -1 when there is no
 * such BLAS here. */
int tsh_blas_threads(int n);

/* What this worker's libtorch offers, for the start-up log. */
struct tsh_runtime {
    const char *torch_version; /* the libtorch headers built against, e.g. "2.11.0" */
    int cuda_available;        /* torch::cuda::is_available() */
    int device_count;          /* CUDA devices it sees (CUDA_VISIBLE_DEVICES applies) */
    const char *graphs_off;    /* NULL when CUDA graphs can be captured, else why not */
};
void tsh_runtime_info(struct tsh_runtime *rt);

/* Loads a TorchScript file onto cuda:gpu_id, or the CPU for gpu_id < 0 or when libtorch has no
 * CUDA (tsh_model_device() then answers -1, for the caller to log). Fails for a gpu_id libtorch
 * does not see. A worker serves on one device: a later load must name the same one. */
struct tsh_model *tsh_load(const char *path, int gpu_id, char **err);
/* The CUDA device index the model is on, -1 for the CPU. */
int tsh_model_device(const struct tsh_model *m);
/* From now on, each new set of input shapes and dtypes (a batch size, for fixed sample shapes)
 * is captured as a CUDA graph at its first forward and replayed after, at most max_graphs of
 * them (later sets run eagerly), the two forwards before a capture included. A set the capture
 * fails for (an output on the host, a sync in forward) runs eagerly. -1 with *err when the
 * model is not on a CUDA device or the build has no CUDA graphs (torch_graph.h). */
int tsh_cuda_graphs(struct tsh_model *m, int max_graphs, char **err);
/* What the graphs did since the last call (captures, failures and why), malloc'd; NULL for
 * nothing. For the handler's log. */
char *tsh_graph_note(struct tsh_model *m);
struct tsh_freeze_info {
    int transposed;     /* aten::linear calls rewritten to use a transposed constant weight */
    size_t bytes;       /* tensor constants the frozen forward holds, each storage once */
    size_t extra_bytes; /* what transposing would hold on top of the weights as they were */
    int few_rows;       /* products by a large constant that take a matrix-vector call per
                         * row for inputs of few rows (torch_shim.cpp: few_rows_matmul) */
    int in_place;       /* bias adds and activations that write into their input, which
                         * nothing else reads (torch_shim.cpp: bias_in_place,
                         * activation_in_place) */
    int onednn;         /* convolutions and linears that run on oneDNN (TSH_OPT_INFERENCE) */
};
/* How far tsh_freeze goes (model-config.yaml handler.optimize). */
enum tsh_optimize {
    TSH_OPT_FREEZE = 1, /* torch.jit.freeze without numeric folding, then the passes below */
    TSH_OPT_INFERENCE,  /* torch.jit.optimize_for_inference's passes, then the passes below */
};
/* Freezes the module for inference (torch.jit.freeze: attributes that forward does not change
 * become constants). With TSH_OPT_INFERENCE, as torch.jit.optimize_for_inference does: numeric
 * folding (conv + batch norm, conv + add/mul by a constant; dropout removed), and convolutions
 * (and what follows them) on oneDNN with their weights reordered once; answers then differ from
 * the loaded module's by float rounding in a different order (resnet18: about 1e-5). Then, at
 * both levels, stores the weights of each aten::linear with a constant weight transposed, as
 * torch.jit.optimize_for_inference does. OpenBLAS packs the
 * weight of every x @ W^T on each call; with W^T stored, its packing costs about a quarter of
 * what it did (mlp, batch 1: 33k instructions per forward instead of 144k). A product by a large
 * constant takes a matrix-vector call per row when its input has few rows (up to four,
 * for weights of 1M elements and more), which reads the weight once per row and packs nothing.
 * A bias add on a product that nothing else reads, and an activation with an in-place form on
 * that sum (relu, gelu, sigmoid, ...), write into it instead of a new tensor. Returns 0 with *info
 * filled in; the module is then the frozen one unless info->extra_bytes > 0 (a weight also read by
 * something other than a linear: the module is left as loaded). On failure the module is left as it
 * was and can still be used. */
int tsh_freeze(struct tsh_model *m, int level, struct tsh_freeze_info *info, char **err);
/* Rewrites the linears of a CPU model's methods (those named, forward always) to XNNPACK's
 * prepacked ones, with PyTorch's own passes (those torch.utils.mobile_optimizer runs to prepack,
 * and no other of its steps): the module is frozen (its attributes become constants), and each
 * aten::linear whose weight is constant (and each 2-D convolution, which the same pass rewrites)
 * runs on a copy of the weight that XNNPACK packed once, here. On a CPU with few rows per product
 * it is several times OpenBLAS's sgemm, which packs the whole weight on every call; answers differ
 * by float rounding in another order. An XNNPACK operator keeps the pointers of the call it runs:
 * one module so rewritten may run on one thread at a time. Returns 0 with *linears, the
 * operators rewritten (sub-blocks included); on failure (a model on a GPU, a libtorch without
 * XNNPACK, more than one intra-op thread, a method that does not freeze) the module is left as
 * it was. */
int tsh_xnnpack(struct tsh_model *m, const char *const *methods, size_t nmethods, int *linears,
                char **err);
void tsh_model_free(struct tsh_model *m);

/* Runs forward(in...) under InferenceMode, on the model's device. The result (a tensor, a
 * scalar, or nested tuples / lists / dict values of them) is flattened depth-first into *out
 * (*nout tensors), each copied to a contiguous malloc'd buffer. */
int tsh_forward(struct tsh_model *m, const struct tsh_tensor *in, size_t nin,
                struct tsh_tensor **out, size_t *nout, char **err);
void tsh_tensors_free(struct tsh_tensor *t, size_t n);

/* ---- scripted methods other than forward, and values kept between calls ----
 *
 * A model may export methods besides forward (@torch.jit.export): a text generator's
 * new_cache(slots, ctx) and step(cache, ...), say. tsh_call runs one by name with tensors,
 * integers, floats and kept values as arguments, and copies its result out as tsh_forward does.
 * tsh_call_keep runs one and keeps its result inside the shim as a struct tsh_value (a KV cache
 * the model updates in place on later calls), so that no copy of it ever crosses this interface.
 * A kept value belongs to the caller, who frees it with tsh_value_free, before or after the
 * model; it holds a reference to the result's storage, never to the model. */
struct tsh_value;

enum tsh_arg_kind { TSH_ARG_TENSOR = 0, TSH_ARG_INT, TSH_ARG_DOUBLE, TSH_ARG_VALUE };

struct tsh_arg {
    int kind; /* enum tsh_arg_kind */
    union {
        struct tsh_tensor t;     /* TSH_ARG_TENSOR: borrowed for the call, as in tsh_forward */
        int64_t i;               /* TSH_ARG_INT: a TorchScript int */
        double d;                /* TSH_ARG_DOUBLE: a TorchScript float */
        struct tsh_value *value; /* TSH_ARG_VALUE: passed as is (the method may change it) */
    } u;
};

/* 1 if the module has a method of that name (forward included), else 0. */
int tsh_has_method(struct tsh_model *m, const char *method);
/* Runs method(args...) under InferenceMode; its result is flattened and copied out as in
 * tsh_forward. An unknown method, or arguments its schema refuses, are errors. */
int tsh_call(struct tsh_model *m, const char *method, const struct tsh_arg *args, size_t nargs,
             struct tsh_tensor **out, size_t *nout, char **err);
/* Runs method(args...) under InferenceMode and keeps its result: *value, freed with
 * tsh_value_free. */
int tsh_call_keep(struct tsh_model *m, const char *method, const struct tsh_arg *args, size_t nargs,
                  struct tsh_value **value, char **err);
/* Bytes of the tensors a kept value holds (each storage once). */
size_t tsh_value_nbytes(const struct tsh_value *v);
/* NULL is a no-op. */
void tsh_value_free(struct tsh_value *v);

/* Argument names of forward() without `self`, from its schema: *names is a malloc'd array of
 * malloc'd strings; free with tsh_names_free. */
int tsh_forward_arg_names(struct tsh_model *m, char ***names, size_t *n, char **err);
void tsh_names_free(char **names, size_t n);

#ifdef __cplusplus
}
#endif

#endif
