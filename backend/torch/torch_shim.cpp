/*
 * torch_shim: TorchScript through libtorch, behind the C API of torch_shim.h.
 *
 * Every extern "C" function is one try block: c10::Error and std::exception are turned into a
 * malloc'd message, because a C++ exception unwinding through C frames is undefined behaviour.
 * Inputs are wrapped with from_blob (no copy); outputs are made contiguous and copied out, so the
 * C side never holds a libtorch object. The profiling executor is switched off at init: with it
 * on, the first forwards re-optimise the graph and take 30-100 ms instead of a few. The graph
 * rewrites for inference (tsh_freeze, tsh_xnnpack) are torch_freeze.cpp's.
 */
#include "torch_shim.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "torch_device.h"

#include "torch_int.h"

namespace tsh_int
{

char *dup_cstr(const std::string &s)
{
    char *p = static_cast<char *>(std::malloc(s.size() + 1));
    if (!p)
        std::abort();
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

/* TorchScript errors carry a TorchScript traceback before the actual reason, e.g.
 * "The following operation failed...\nTraceback...\nRuntimeError: mat1 and mat2 shapes...".
 * A client needs the reason: the line after the last "Error: " tag, else the first line. */
static std::string summarize(const char *what)
{
    std::string s(what ? what : "unknown error");
    size_t tag = s.rfind("Error: ");
    size_t start = 0;
    if (tag != std::string::npos) {
        size_t bol = s.rfind('\n', tag);
        bol = bol == std::string::npos ? 0 : bol + 1;
        /* keep "RuntimeError: reason" when the tag starts its line */
        start = bol;
    }
    size_t eol = s.find('\n', start);
    std::string line = s.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r'))
        line.pop_back();
    return line.empty() ? s : line;
}

void set_err(char **err, const char *what)
{
    if (err)
        *err = dup_cstr(summarize(what));
}

} // namespace tsh_int

using tsh_int::dup_cstr;
using tsh_int::guarded;

namespace
{

/* The C dtypes and their ATen types, read both ways. */
const struct {
    int dtype;
    at::ScalarType type;
} dtype_map[] = {
    {TSH_FLOAT32, at::kFloat},     {TSH_FLOAT64, at::kDouble}, {TSH_FLOAT16, at::kHalf},
    {TSH_BFLOAT16, at::kBFloat16}, {TSH_INT64, at::kLong},     {TSH_INT32, at::kInt},
    {TSH_INT16, at::kShort},       {TSH_INT8, at::kChar},      {TSH_UINT8, at::kByte},
    {TSH_BOOL, at::kBool},
};

at::ScalarType to_scalar(int dtype)
{
    for (const auto &m : dtype_map)
        if (m.dtype == dtype)
            return m.type;
    throw std::invalid_argument("unknown tensor dtype " + std::to_string(dtype));
}

/* -1 when the C side has no matching dtype (the tensor is then converted to float32). */
int from_scalar(at::ScalarType t)
{
    for (const auto &m : dtype_map)
        if (m.type == t)
            return m.dtype;
    return -1;
}

void flatten(const c10::IValue &v, std::vector<at::Tensor> &out)
{
    if (v.isTensor()) {
        out.push_back(v.toTensor());
    } else if (v.isTuple()) {
        for (const auto &e : v.toTupleRef().elements())
            flatten(e, out);
    } else if (v.isList()) {
        for (const c10::IValue &e : v.toListRef())
            flatten(e, out);
    } else if (v.isGenericDict()) {
        for (const auto &kv : v.toGenericDict())
            flatten(kv.value(), out);
    } else if (v.isDouble()) {
        out.push_back(torch::scalar_tensor(v.toDouble(), at::kDouble));
    } else if (v.isInt()) {
        out.push_back(torch::scalar_tensor(v.toInt(), at::kLong));
    } else if (v.isBool()) {
        out.push_back(torch::scalar_tensor(v.toBool(), at::kBool));
    } else if (v.isNone()) {
        /* an Optional output that is None contributes nothing */
    } else {
        throw std::runtime_error("unsupported model output type " + v.tagKind());
    }
}

/* t in a dtype the C side has (complex and others become float32), on its device. */
at::Tensor c_dtype(const at::Tensor &t)
{
    if (t.dim() > TSH_MAX_DIMS)
        throw std::runtime_error("model output has " + std::to_string(t.dim()) +
                                 " dimensions, at most " + std::to_string(TSH_MAX_DIMS) +
                                 " are supported");
    if (t.is_complex() || from_scalar(t.scalar_type()) < 0)
        return t.to(at::kFloat);
    return t;
}

/* A contiguous host tensor into a malloc'd tsh_tensor. */
void copy_out(const at::Tensor &t, struct tsh_tensor *o)
{
    o->dtype = from_scalar(t.scalar_type());
    o->ndim = static_cast<int>(t.dim());
    for (int i = 0; i < o->ndim; i++)
        o->shape[i] = t.size(i);
    o->nbytes = t.numel() * t.element_size();
    o->data = std::malloc(o->nbytes ? o->nbytes : 1);
    if (!o->data)
        throw std::bad_alloc();
    if (o->nbytes)
        std::memcpy(o->data, t.data_ptr(), o->nbytes);
}

/* Tensors onto the host and into a calloc'd array of malloc'd tsh_tensors; *res and *nres say
 * what was made so far, so that the caller frees it when a copy throws. */
void copy_all_out(const std::vector<at::Tensor> &flat, struct tsh_tensor **res, size_t *nres)
{
    std::vector<at::Tensor> host = tsh_device::to_host(flat);
    *res = static_cast<tsh_tensor *>(std::calloc(host.size() ? host.size() : 1, sizeof(**res)));
    if (!*res)
        throw std::bad_alloc();
    for (const at::Tensor &t : host)
        copy_out(t, &(*res)[(*nres)++]);
}

/* The arguments of tsh_call as IValues: tensors wrapped without a copy, on the model's device
 * (through the pinned input buffer, as tsh_forward's), kept values as they are. */
std::vector<c10::IValue> call_args(struct tsh_model *m, const struct tsh_arg *args, size_t nargs)
{
    std::vector<c10::IValue> v(nargs);
    std::vector<at::Tensor> host;
    std::vector<size_t> at;
    for (size_t i = 0; i < nargs; i++) {
        const tsh_arg &a = args[i];
        switch (a.kind) {
        case TSH_ARG_TENSOR: {
            const tsh_tensor &t = a.u.t;
            if (t.ndim < 0 || t.ndim > TSH_MAX_DIMS)
                throw std::invalid_argument("argument " + std::to_string(i) + " has " +
                                            std::to_string(t.ndim) + " dimensions");
            std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
            host.push_back(torch::from_blob(
                t.data, shape,
                torch::TensorOptions().dtype(to_scalar(t.dtype)).device(torch::kCPU)));
            at.push_back(i);
            break;
        }
        case TSH_ARG_INT:
            v[i] = a.u.i;
            break;
        case TSH_ARG_DOUBLE:
            v[i] = a.u.d;
            break;
        case TSH_ARG_VALUE:
            if (!a.u.value)
                throw std::invalid_argument("argument " + std::to_string(i) + ": no value");
            v[i] = a.u.value->v;
            break;
        default:
            throw std::invalid_argument("argument " + std::to_string(i) + ": unknown kind " +
                                        std::to_string(a.kind));
        }
    }
    if (!host.empty() && m->dev.is_cuda())
        host = tsh_device::upload(tsh_device::stage(host), m->dev);
    for (size_t k = 0; k < host.size(); k++)
        v[at[k]] = host[k];
    return v;
}

c10::IValue run_method(struct tsh_model *m, const char *method, const struct tsh_arg *args,
                       size_t nargs)
{
    c10::optional<torch::jit::Method> fn = m->mod.find_method(method ? method : "");
    if (!fn)
        throw std::invalid_argument(std::string("the model has no method ") +
                                    (method ? method : "(null)"));
    return (*fn)(call_args(m, args, nargs));
}

/* forward(inputs), flattened (flatten), each output in a dtype the C side has. */
std::vector<at::Tensor> run_forward(tsh_model *m, const std::vector<at::Tensor> &inputs)
{
    std::vector<c10::IValue> args(inputs.begin(), inputs.end());
    c10::IValue ret = m->mod.forward(args);
    std::vector<at::Tensor> flat;
    flatten(ret, flat);
    for (at::Tensor &t : flat)
        t = c_dtype(t);
    return flat;
}

} // namespace

extern "C" {

size_t tsh_dtype_size(int dtype)
{
    static const size_t sz[TSH_DTYPE_COUNT] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1};
    return dtype >= 0 && dtype < TSH_DTYPE_COUNT ? sz[dtype] : 0;
}

const char *tsh_dtype_name(int dtype)
{
    static const char *const names[TSH_DTYPE_COUNT] = {"float32", "float64", "float16", "bfloat16",
                                                       "int64",   "int32",   "int16",   "int8",
                                                       "uint8",   "bool"};
    return dtype >= 0 && dtype < TSH_DTYPE_COUNT ? names[dtype] : "?";
}

int tsh_init(int intra_threads, char **err)
{
    return guarded(err, [&] {
        torch::jit::getProfilingMode() = false;
        if (intra_threads > 0) {
            at::set_num_threads(intra_threads);
            at::set_num_interop_threads(intra_threads);
        }
    });
}

int tsh_blas_threads(int n)
{
    typedef void (*set_fn)(int);
    typedef int (*get_fn)(void);
    static set_fn set = reinterpret_cast<set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    static get_fn get = reinterpret_cast<get_fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    /* the pthread build's pool, stopped: it is started again by the next product on more than
     * one thread */
    static get_fn stop = reinterpret_cast<get_fn>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"));
    if (!set || !get)
        return -1;
    int had = get();
    if (n > 0 && n != had) {
        set(n);
        if (n == 1 && stop)
            stop();
    }
    return had;
}

void tsh_runtime_info(struct tsh_runtime *rt)
{
    rt->torch_version = TORCH_VERSION;
    rt->cuda_available = 0;
    rt->device_count = 0;
    rt->graphs_off = tsh_graph::unavailable();
    try {
        rt->cuda_available = torch::cuda::is_available();
        rt->device_count = rt->cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
    } catch (...) {
        /* a CUDA runtime that cannot even be asked: no CUDA */
    }
}

struct tsh_model *tsh_load(const char *path, int gpu_id, char **err)
{
    tsh_model *m = nullptr;
    if (guarded(err, [&] {
            bool cpu_fallback;
            c10::Device dev = tsh_device::open(gpu_id, &cpu_fallback);
            m = new tsh_model{torch::jit::load(path, dev), dev, nullptr, 0};
            m->mod.eval();
        }) == 0)
        return m;
    delete m;
    return nullptr;
}

int tsh_model_device(const struct tsh_model *m)
{
    return m->dev.is_cuda() ? static_cast<int>(m->dev.index()) : -1;
}

int tsh_cuda_graphs(struct tsh_model *m, int max_graphs, char **err)
{
    return guarded(err, [&] {
        if (!m->dev.is_cuda())
            throw std::runtime_error("the model is on the CPU, not on a GPU");
        if (const char *why = tsh_graph::unavailable())
            throw std::runtime_error(why);
        m->max_graphs = max_graphs > 0 ? static_cast<size_t>(max_graphs) : 1;
        m->graphs.reset(new tsh_device::graphs(m->max_graphs));
    });
}

char *tsh_graph_note(struct tsh_model *m)
{
    if (!m->graphs)
        return nullptr;
    try {
        std::string n = m->graphs->take_note();
        return n.empty() ? nullptr : dup_cstr(n);
    } catch (...) {
        return nullptr;
    }
}

void tsh_model_free(struct tsh_model *m)
{
    try {
        delete m;
    } catch (...) {
        /* a destructor that throws has nowhere to report to */
    }
}

int tsh_forward(struct tsh_model *m, const struct tsh_tensor *in, size_t nin,
                struct tsh_tensor **out, size_t *nout, char **err)
{
    *out = nullptr;
    *nout = 0;
    struct tsh_tensor *res = nullptr;
    size_t nres = 0;
    int rc = guarded(err, [&] {
        c10::InferenceMode guard;
        std::vector<at::Tensor> host;
        host.reserve(nin);
        for (size_t i = 0; i < nin; i++) {
            const tsh_tensor &t = in[i];
            if (t.ndim < 0 || t.ndim > TSH_MAX_DIMS)
                throw std::invalid_argument("input " + std::to_string(i) + " has " +
                                            std::to_string(t.ndim) + " dimensions");
            std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
            host.push_back(torch::from_blob(
                t.data, shape,
                torch::TensorOptions().dtype(to_scalar(t.dtype)).device(torch::kCPU)));
        }
        std::vector<at::Tensor> flat;
        if (m->dev.is_cuda()) {
            /* up through the pinned buffer, forward (or its graph), down through the other */
            std::vector<at::Tensor> staged = tsh_device::stage(host);
            auto fwd = [m](const std::vector<at::Tensor> &x) { return run_forward(m, x); };
            flat = m->graphs ? m->graphs->run(staged, m->dev, fwd)
                             : fwd(tsh_device::upload(staged, m->dev));
        } else {
            flat = run_forward(m, host);
        }
        copy_all_out(flat, &res, &nres);
        *out = res;
        *nout = nres;
    });
    if (rc)
        tsh_tensors_free(res, nres);
    return rc;
}

void tsh_tensors_free(struct tsh_tensor *t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++)
        std::free(t[i].data);
    std::free(t);
}

int tsh_has_method(struct tsh_model *m, const char *method)
{
    try {
        return method && m->mod.find_method(method).has_value();
    } catch (...) {
        return 0;
    }
}

int tsh_call(struct tsh_model *m, const char *method, const struct tsh_arg *args, size_t nargs,
             struct tsh_tensor **out, size_t *nout, char **err)
{
    *out = nullptr;
    *nout = 0;
    struct tsh_tensor *res = nullptr;
    size_t nres = 0;
    int rc = guarded(err, [&] {
        c10::InferenceMode guard;
        c10::IValue ret = run_method(m, method, args, nargs);
        std::vector<at::Tensor> flat;
        flatten(ret, flat);
        for (at::Tensor &t : flat)
            t = c_dtype(t);
        copy_all_out(flat, &res, &nres);
        *out = res;
        *nout = nres;
    });
    if (rc)
        tsh_tensors_free(res, nres);
    return rc;
}

int tsh_call_keep(struct tsh_model *m, const char *method, const struct tsh_arg *args, size_t nargs,
                  struct tsh_value **value, char **err)
{
    *value = nullptr;
    tsh_value *v = nullptr;
    int rc = guarded(err, [&] {
        c10::InferenceMode guard;
        v = new tsh_value{run_method(m, method, args, nargs)};
        /* the input buffer is the next call's: its uploads must be done */
        if (m->dev.is_cuda())
            tsh_device::sync();
    });
    if (rc == 0)
        *value = v;
    return rc;
}

size_t tsh_value_nbytes(const struct tsh_value *v)
{
    size_t n = 0;
    try {
        std::vector<at::Tensor> flat;
        flatten(v->v, flat);
        std::unordered_set<const void *> seen;
        for (const at::Tensor &t : flat)
            if (t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
                n += t.storage().nbytes();
    } catch (...) {
        /* a value flatten cannot read holds no tensor it can count */
    }
    return n;
}

void tsh_value_free(struct tsh_value *v)
{
    try {
        delete v;
    } catch (...) {
        /* as tsh_model_free */
    }
}

int tsh_forward_arg_names(struct tsh_model *m, char ***names, size_t *n, char **err)
{
    *names = nullptr;
    *n = 0;
    return guarded(err, [&] {
        const c10::FunctionSchema &schema = m->mod.get_method("forward").function().getSchema();
        const auto &args = schema.arguments();
        /* the module itself, whatever forward calls it (self, me, ...) */
        size_t first =
            (!args.empty() && args[0].type()->kind() == c10::TypeKind::ClassType) ? 1 : 0;
        size_t cnt = args.size() - first;
        char **v = static_cast<char **>(std::calloc(cnt ? cnt : 1, sizeof(char *)));
        if (!v)
            throw std::bad_alloc();
        for (size_t i = 0; i < cnt; i++)
            v[i] = dup_cstr(args[first + i].name());
        *names = v;
        *n = cnt;
    });
}

void tsh_names_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        std::free(names[i]);
    std::free(names);
}

} // extern "C"
