/*
 * torch_graph_none: what torch_graph.h promises, in a build without CUDA graphs (a libtorch
 * without CUDA, or no CUDA runtime headers to compile torch_graph.cpp with). Nothing captures;
 * the shim asks unavailable() first and tells the handler why.
 */
#include "torch_graph.h"

#include <stdexcept>

namespace tsh_graph
{

struct graph {
};

const char *unavailable()
{
    return "this worker was built without CUDA graphs (a libtorch without CUDA, or no CUDA "
           "runtime headers: make TORCH_DIR=DIR CUDA_HOME=DIR)";
}

graph *capture(const std::function<std::vector<at::Tensor>()> &forward,
               std::vector<at::Tensor> *outputs)
{
    (void)forward;
    (void)outputs;
    throw std::runtime_error(unavailable());
}

void replay(graph *g)
{
    (void)g;
}

void destroy(graph *g)
{
    delete g;
}

} // namespace tsh_graph
