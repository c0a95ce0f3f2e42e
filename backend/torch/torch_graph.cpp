/*
 * torch_graph: CUDA graphs through at::cuda::CUDAGraph (torch_graph.h). Built only against a
 * libtorch with CUDA and the CUDA runtime's headers; torch_graph_none.cpp stands in otherwise.
 * Only the calls every libtorch since 1.10 has are used (capture_begin() and capture_end() with
 * their defaults, replay()), so the file compiles against each of them.
 */
#include "torch_graph.h"

#include <ATen/cuda/CUDAGraph.h>

namespace tsh_graph
{

struct graph {
    at::cuda::CUDAGraph g;
};

const char *unavailable()
{
    return nullptr;
}

graph *capture(const std::function<std::vector<at::Tensor>()> &forward,
               std::vector<at::Tensor> *outputs)
{
    graph *gr = new graph;
    try {
        gr->g.capture_begin();
        try {
            *outputs = forward();
        } catch (...) {
            /* ends the capture whatever it held, so the stream can be used again; its own
             * error (the capture was invalidated) says less than forward's */
            try {
                gr->g.capture_end();
            } catch (...) {
            }
            throw;
        }
        gr->g.capture_end();
    } catch (...) {
        outputs->clear();
        delete gr;
        throw;
    }
    return gr;
}

void replay(graph *g)
{
    g->g.replay();
}

void destroy(graph *g)
{
    delete g;
}

} // namespace tsh_graph
