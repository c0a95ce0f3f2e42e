/*
 * torch_device: the worker's device, internal to backend/torch/ (the shim's C API is
 * torch_shim.h). One worker process serves one model on one device: the CPU, or the CUDA device
 * the frontend assigned (gpu_id, TorchServe's numbering of the visible devices).
 *
 * Owns, for a CUDA device: the worker's own stream (taken from libtorch's pool and made current
 * for the process's one thread, so every kernel of a forward runs on it), and two pinned host
 * buffers through which inputs go up and outputs come back (copies that do not wait for the
 * host; the stream is synchronised once per forward). Per model, the CUDA graphs captured per
 * set of input shapes (graphs()).
 *
 * Everything here compiles against a CPU libtorch: CUDA is reached through c10's
 * device-generic interfaces and asked for at run time (torch::cuda::is_available()); the graph
 * calls are torch_graph.h's. Threading: the worker's one thread. Errors: C++ exceptions, which
 * the shim's guarded() turns into messages.
 */
#ifndef TS_TORCH_DEVICE_H
#define TS_TORCH_DEVICE_H

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "torch_graph.h"

namespace tsh_device
{

/* The device for gpu_id: the CPU for gpu_id < 0 or when libtorch has no CUDA (*cpu_fallback
 * then says so for gpu_id >= 0), else cuda:gpu_id, opened on first use (its stream made
 * current). Throws for a gpu_id libtorch does not see, or another device than the one the
 * process opened. */
c10::Device open(int gpu_id, bool *cpu_fallback);

/* Copies of host tensors (contiguous, any dtype) in the pinned input buffer, for a CUDA
 * device: views of the buffer, valid until the next call. */
std::vector<at::Tensor> stage(const std::vector<at::Tensor> &host);
/* Staged tensors on dev, the copies queued on the worker's stream. */
std::vector<at::Tensor> upload(const std::vector<at::Tensor> &staged, const c10::Device &dev);

/* Contiguous host tensors with the values of outs: CUDA tensors through the pinned output
 * buffer; they stay valid until the next call. CPU tensors are made contiguous and returned as
 * they are. With a CUDA device open, the worker's stream is synchronised once, whatever the
 * outputs: the staging buffers are free for the next forward after it. */
std::vector<at::Tensor> to_host(const std::vector<at::Tensor> &outs);

/* Waits for the worker's stream (no-op without a CUDA device open). */
void sync();

/* One model's CUDA graphs, one per set of input shapes and dtypes (a batch size, for fixed
 * sample shapes), captured the first time the set is seen, at most `max` of them; a set that
 * cannot be captured is remembered and runs eagerly. */
class graphs
{
  public:
    explicit graphs(size_t max) : max_(max)
    {
    }
    ~graphs();
    graphs(const graphs &) = delete;
    graphs &operator=(const graphs &) = delete;

    /* The outputs of forward(inputs), inputs the staged ones (stage()): a replay of the graph
     * of this set of shapes, captured now if it is new, its inputs copied straight from the
     * staging buffer; or forward(upload(staged)) itself when the set could not be captured or
     * the cap is reached. */
    std::vector<at::Tensor>
    run(const std::vector<at::Tensor> &staged, const c10::Device &dev,
        const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor> &)> &forward);
    size_t captured() const
    {
        return by_shape_.size();
    }
    /* What happened since the last call, for the handler's log ("" for nothing): a capture,
     * a failed one and why, the cap reached. */
    std::string take_note();

  private:
    struct entry {
        tsh_graph::graph *g = nullptr;
        std::vector<at::Tensor> in, out; /* the graph's static inputs and outputs */
    };
    std::map<std::string, entry> by_shape_;
    std::map<std::string, std::string> failed_; /* shape key -> why */
    size_t max_;
    bool cap_noted_ = false;
    std::string note_;

    entry *
    capture(const std::string &key, const std::vector<at::Tensor> &staged, const c10::Device &dev,
            const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor> &)> &forward);
};

} // namespace tsh_device

#endif
