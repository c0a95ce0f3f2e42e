/*
 * torch_graph: CUDA graphs for the shim (torch_shim.cpp), internal to backend/torch/.
 *
 * The one piece of the shim that cannot be compiled from libtorch's headers alone: a graph
 * needs at::cuda::CUDAGraph, whose header needs the CUDA runtime's. The Makefile builds
 * torch_graph.cpp when libtorch has CUDA and those headers are found, and torch_graph_none.cpp
 * otherwise; both define what is declared here, so the shim is the same source in every build
 * and asks at run time (unavailable()).
 *
 * Threading: the worker's one thread, with the worker's CUDA stream current (the shim's
 * device state). Errors are C++ exceptions, caught by the shim's guarded(). Memory: a graph
 * owns its private memory pool, which holds its outputs; destroy() frees both.
 */
#ifndef TS_TORCH_GRAPH_H
#define TS_TORCH_GRAPH_H

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace tsh_graph
{

struct graph;

/* NULL when graphs can be captured in this build; otherwise why they cannot. */
const char *unavailable();

/* Captures what forward() launches on the current stream (not the default stream: the shim's
 * worker stream) into a new graph; *outputs are forward()'s results, which each replay()
 * overwrites in place. Throws (the stream is out of capture mode again) if forward() did
 * something a graph cannot hold, such as a copy to the host. */
graph *capture(const std::function<std::vector<at::Tensor>()> &forward,
               std::vector<at::Tensor> *outputs);
/* Launches the captured work again on the capture's stream. */
void replay(graph *g);
void destroy(graph *g);

} // namespace tsh_graph

#endif
