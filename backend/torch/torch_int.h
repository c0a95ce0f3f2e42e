/*
 * torch_int: what the shim's own files share (backend/torch/ only; the C API is torch_shim.h):
 * the model and kept-value structs behind the C API's opaque pointers, and guarded(), where
 * libtorch's exceptions stop. torch_shim.cpp loads and runs models; torch_freeze.cpp rewrites
 * their graphs for inference (tsh_freeze, tsh_xnnpack).
 */
#ifndef TS_TORCH_INT_H
#define TS_TORCH_INT_H

#include <torch/script.h>

#include <memory>
#include <string>

#include "torch_device.h"

struct tsh_model {
    torch::jit::script::Module mod;
    c10::Device dev;
    std::unique_ptr<tsh_device::graphs> graphs; /* tsh_cuda_graphs(), else null */
    size_t max_graphs = 0;
};

/* what tsh_call_keep keeps: a method's result, alive between calls */
struct tsh_value {
    c10::IValue v;
};

namespace tsh_int
{

/* s as a malloc'd C string (aborts when out of memory) */
char *dup_cstr(const std::string &s);
/* *err = the reason in what (a TorchScript traceback's last error line), malloc'd; err may be
 * NULL */
void set_err(char **err, const char *what);

/* Runs f; 0, or -1 with *err set if it threw: the one place where libtorch's exceptions stop */
template <typename F> int guarded(char **err, F &&f)
{
    try {
        f();
        return 0;
    } catch (const c10::Error &e) {
        set_err(err, e.what_without_backtrace());
    } catch (const std::exception &e) {
        set_err(err, e.what());
    }
    return -1;
}

} // namespace tsh_int

#endif
