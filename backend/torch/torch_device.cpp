/*
 * torch_device: the worker's device (torch_device.h). A worker process serves one model on one
 * device, so the device's state is the process's: which device, its stream, the staging buffers.
 *
 * Why a stream of our own: the default (legacy) stream synchronises with every other stream of
 * the context, and a CUDA graph cannot be captured on it. Why pinned staging: a copy from
 * pageable memory makes the driver stage it itself and wait; from pinned memory it is one DMA
 * that the host does not wait for, so the upload, the forward and the download queue back to
 * back and the host waits once, at the end. The buffers grow by doubling and are reused: after
 * the first requests a forward allocates no host memory for its transfers.
 */
#include "torch_device.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tsh_device
{
namespace
{

struct state {
    bool cuda_open = false;
    c10::Device dev{c10::kCPU};
    c10::optional<c10::Stream> stream;
    at::Tensor pin_in, pin_out; /* uint8, pinned */
};

state &st()
{
    static state s;
    return s;
}

/* every staged tensor starts on a 64-byte boundary: a view of any dtype is aligned */
constexpr size_t ALIGN = 64;

size_t aligned(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

size_t nbytes(const at::Tensor &t)
{
    return static_cast<size_t>(t.numel()) * t.element_size();
}

/* buf, grown (a new pinned allocation, doubling) to at least n bytes */
at::Tensor &pinned(at::Tensor &buf, size_t n)
{
    if (!buf.defined() || static_cast<size_t>(buf.numel()) < n) {
        size_t cap = buf.defined() ? static_cast<size_t>(buf.numel()) : 4096;
        while (cap < n)
            cap *= 2;
        buf = at::empty({static_cast<int64_t>(cap)},
                        at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    }
    return buf;
}

/* The bytes of buf at off, seen with like's dtype and shape. */
at::Tensor view_at(const at::Tensor &buf, size_t off, const at::Tensor &like)
{
    return buf.narrow(0, static_cast<int64_t>(off), static_cast<int64_t>(nbytes(like)))
        .view(like.scalar_type())
        .view(like.sizes());
}

std::string first_line(const char *what)
{
    std::string s(what ? what : "unknown error");
    size_t eol = s.find('\n');
    return eol == std::string::npos ? s : s.substr(0, eol);
}

std::string shape_key(const std::vector<at::Tensor> &inputs)
{
    std::string k;
    for (const at::Tensor &t : inputs) {
        if (!k.empty())
            k += ", ";
        k += std::string(c10::toString(t.scalar_type())) + "[";
        for (int64_t d = 0; d < t.dim(); d++)
            k += (d ? "x" : "") + std::to_string(t.size(d));
        k += "]";
    }
    return k;
}

} // namespace

c10::Device open(int gpu_id, bool *cpu_fallback)
{
    *cpu_fallback = false;
    if (gpu_id < 0)
        return c10::Device(c10::kCPU);
    if (!torch::cuda::is_available()) {
        *cpu_fallback = true;
        return c10::Device(c10::kCPU);
    }
    int64_t n = static_cast<int64_t>(torch::cuda::device_count());
    if (gpu_id >= n) {
        const char *vis = std::getenv("CUDA_VISIBLE_DEVICES");
        throw std::runtime_error("gpu_id " + std::to_string(gpu_id) + ": libtorch sees " +
                                 std::to_string(n) + " CUDA device(s)" +
                                 (vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : ""));
    }
    c10::Device dev(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu_id));
    state &s = st();
    if (s.cuda_open) {
        if (s.dev != dev)
            throw std::runtime_error("this worker already serves on " + s.dev.str() + ", not " +
                                     dev.str());
        return dev;
    }
    c10::impl::VirtualGuardImpl impl(c10::kCUDA);
    impl.setDevice(dev);
    s.stream = impl.getStreamFromGlobalPool(dev, /*isHighPriority=*/false);
    /* current for this device on this (the only) thread, for the rest of the process */
    impl.exchangeStream(*s.stream);
    s.dev = dev;
    s.cuda_open = true;
    return dev;
}

std::vector<at::Tensor> stage(const std::vector<at::Tensor> &host)
{
    size_t total = 0;
    for (const at::Tensor &t : host)
        total += aligned(nbytes(t));
    at::Tensor &buf = pinned(st().pin_in, total ? total : ALIGN);
    uint8_t *base = buf.data_ptr<uint8_t>();
    std::vector<at::Tensor> out;
    out.reserve(host.size());
    size_t off = 0;
    for (const at::Tensor &t : host) {
        size_t n = nbytes(t);
        if (n)
            std::memcpy(base + off, t.data_ptr(), n);
        out.push_back(view_at(buf, off, t));
        off += aligned(n);
    }
    return out;
}

std::vector<at::Tensor> upload(const std::vector<at::Tensor> &staged, const c10::Device &dev)
{
    std::vector<at::Tensor> out;
    out.reserve(staged.size());
    for (const at::Tensor &t : staged)
        out.push_back(t.to(at::TensorOptions().device(dev).dtype(t.scalar_type()),
                           /*non_blocking=*/true));
    return out;
}

std::vector<at::Tensor> to_host(const std::vector<at::Tensor> &outs)
{
    std::vector<at::Tensor> dense;
    dense.reserve(outs.size());
    size_t total = 0;
    for (const at::Tensor &t : outs) {
        dense.push_back(t.contiguous());
        if (t.is_cuda())
            total += aligned(nbytes(dense.back()));
    }
    state &s = st();
    if (!s.cuda_open)
        return dense;
    if (total) {
        at::Tensor &buf = pinned(s.pin_out, total);
        size_t off = 0;
        for (at::Tensor &t : dense) {
            if (!t.is_cuda())
                continue;
            at::Tensor host = view_at(buf, off, t);
            host.copy_(t, /*non_blocking=*/true);
            off += aligned(nbytes(t));
            t = host;
        }
    }
    /* the one wait of a forward: the download and what it waited for are done, and so is the
     * upload from the input buffer, which the next forward refills (even when every output
     * was on the host) */
    s.stream->synchronize();
    return dense;
}

void sync()
{
    if (st().stream)
        st().stream->synchronize();
}

graphs::~graphs()
{
    for (auto &kv : by_shape_) {
        kv.second.in.clear();
        kv.second.out.clear();
        tsh_graph::destroy(kv.second.g);
    }
}

std::string graphs::take_note()
{
    std::string n;
    n.swap(note_);
    while (!n.empty() && n.back() == ' ')
        n.pop_back();
    return n;
}

graphs::entry *graphs::capture(
    const std::string &key, const std::vector<at::Tensor> &staged, const c10::Device &dev,
    const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor> &)> &forward)
{
    auto t0 = std::chrono::steady_clock::now();
    std::string why;
    try {
        entry e;
        e.in = upload(staged, dev);
        /* lazy initialisations (cuBLAS handles and workspaces, the executor's first run) must
         * not happen inside the capture: two forwards before it, as PyTorch's docs advise */
        forward(e.in);
        forward(e.in);
        if (st().stream)
            st().stream->synchronize();
        e.g = tsh_graph::capture([&] { return forward(e.in); }, &e.out);
        for (const at::Tensor &t : e.out)
            if (!t.is_cuda()) {
                tsh_graph::destroy(e.g);
                throw std::runtime_error("an output is not a tensor on the GPU");
            }
        /* a capture runs nothing: the replay computes this call's answer */
        tsh_graph::replay(e.g);
        entry &slot = by_shape_[key] = std::move(e);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
        char msg[96];
        std::snprintf(msg, sizeof(msg), " in %.1f ms. ", ms);
        note_ += "CUDA graph captured for inputs " + key + msg;
        return &slot;
    } catch (const c10::Error &ex) {
        why = first_line(ex.what_without_backtrace());
    } catch (const std::exception &ex) {
        why = first_line(ex.what());
    }
    failed_[key] = why;
    note_ += "no CUDA graph for inputs " + key + " (" + why + "): they run eagerly. ";
    return nullptr;
}

std::vector<at::Tensor>
graphs::run(const std::vector<at::Tensor> &staged, const c10::Device &dev,
            const std::function<std::vector<at::Tensor>(const std::vector<at::Tensor> &)> &forward)
{
    std::string key = shape_key(staged);
    auto it = by_shape_.find(key);
    if (it == by_shape_.end()) {
        entry *e = nullptr;
        if (!failed_.count(key)) {
            if (by_shape_.size() < max_) {
                e = capture(key, staged, dev, forward);
            } else if (!cap_noted_) {
                cap_noted_ = true;
                note_ += "CUDA graphs: " + std::to_string(max_) +
                         " captured, the most a model keeps; other inputs run eagerly. ";
            }
        }
        return e ? e->out : forward(upload(staged, dev));
    }
    entry &e = it->second;
    for (size_t i = 0; i < staged.size(); i++)
        e.in[i].copy_(staged[i], /*non_blocking=*/true);
    tsh_graph::replay(e.g);
    return e.out;
}

} // namespace tsh_device
