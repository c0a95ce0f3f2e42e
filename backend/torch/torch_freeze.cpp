/*
 * torch_freeze: a loaded model's graphs rewritten for inference (torch_shim.h: tsh_freeze,
 * tsh_xnnpack): freezing, PyTorch's own inference passes, and ours below (few-row products,
 * bias adds and activations in place), which register their operators here.
 */
#include "torch_shim.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_conv_add_relu_fusion.h>
#include <torch/csrc/jit/passes/frozen_linear_transpose.h>
#include <torch/csrc/jit/passes/frozen_ops_to_mkldnn.h>
#include <torch/csrc/jit/passes/xnnpack_rewrite.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>
#include <torch/script.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "torch_int.h"

using tsh_int::guarded;

namespace
{

/* What a frozen graph holds: its aten::linear calls, the bytes of its tensor constants (each
 * storage counted once; a oneDNN weight has no storage and counts at its elements' size), and
 * the products that run on oneDNN (a convolution, or a linear whose weight is a oneDNN tensor),
 * in a block and the blocks nested in it. */
struct graph_weights {
    int linear = 0;
    int onednn = 0;
    size_t bytes = 0;
    std::unordered_set<const void *> seen;
};

bool is_onednn_constant(const torch::jit::Value *v)
{
    if (v->node()->kind() != torch::jit::prim::Constant ||
        v->type()->kind() != c10::TypeKind::TensorType)
        return false;
    return torch::jit::toIValue(v)->toTensor().is_mkldnn();
}

void count_weights(const torch::jit::Block *b, graph_weights &w)
{
    static const c10::Symbol onednn_conv = c10::Symbol::prim("mkldnn_convolution");
    for (const torch::jit::Node *node : b->nodes()) {
        if (node->kind() == torch::jit::aten::linear) {
            w.linear++;
            if (node->inputs().size() > 1 && is_onednn_constant(node->input(1)))
                w.onednn++;
        }
        if (node->kind() == onednn_conv)
            w.onednn++;
        if (node->kind() == torch::jit::prim::Constant &&
            node->output()->type()->kind() == c10::TypeKind::TensorType) {
            const at::Tensor t = torch::jit::toIValue(node->output())->toTensor();
            if (t.is_mkldnn())
                w.bytes += static_cast<size_t>(t.numel()) * t.element_size();
            else if (t.has_storage() && w.seen.insert(t.storage().unsafeGetStorageImpl()).second)
                w.bytes += t.storage().nbytes();
        }
        for (const torch::jit::Block *sub : node->blocks())
            count_weights(sub, w);
    }
}

/* The XNNPACK operators (prepacked::*_run: linears, and 2-D convolutions, which
 * insertPrePackedOps rewrites too) in b and its sub-blocks (loops, branches). */
int prepacked_runs(const torch::jit::Block *b)
{
    static const c10::Symbol linear = c10::Symbol::fromQualString("prepacked::linear_clamp_run");
    static const c10::Symbol conv = c10::Symbol::fromQualString("prepacked::conv2d_clamp_run");
    static const c10::Symbol convt =
        c10::Symbol::fromQualString("prepacked::conv2d_transpose_clamp_run");
    int n = 0;
    for (const torch::jit::Node *node : b->nodes()) {
        n += node->kind() == linear || node->kind() == conv || node->kind() == convt;
        for (const torch::jit::Block *sub : node->blocks())
            n += prepacked_runs(sub);
    }
    return n;
}

graph_weights weights_of(const std::shared_ptr<torch::jit::Graph> &g)
{
    graph_weights w;
    count_weights(g->block(), w);
    return w;
}

/* A product x @ W with few rows in x. OpenBLAS's sgemm packs all of W on every call, whatever
 * the rows, and once W outgrows the caches that copy costs more than the product; a
 * matrix-vector call per row reads W once each and packs nothing. On one thread here
 * (scripts/bench/matmul_rows_bench.sh), for 1024x1024, 768x3072 and 3072x768 weights one mv per
 * row took about a fifth of matmul's time for one row, half for two, 0.4-0.9 for four, and lost
 * from eight. From 512x512 to 768x768 one row was even (0.92-1.19) and four rows lost, and
 * below that matmul won. Anything else (more rows, sparse x, other dtypes or devices) goes to
 * matmul as before. */
constexpr int64_t FEW_ROWS_MIN_NUMEL = 1 << 20;
constexpr int64_t FEW_ROWS_MAX = 4;

at::Tensor few_rows_matmul(const at::Tensor &x, const at::Tensor &w)
{
    bool fits = x.layout() == at::kStrided && w.layout() == at::kStrided && x.dim() >= 1 &&
                x.numel() > 0 && w.dim() == 2 && x.size(-1) == w.size(0) &&
                x.scalar_type() == w.scalar_type() &&
                (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) &&
                x.device().is_cpu() && w.device().is_cpu();
    int64_t rows = fits ? x.numel() / x.size(-1) : 0;
    if (!fits || rows > FEW_ROWS_MAX || w.numel() < FEW_ROWS_MIN_NUMEL)
        return at::matmul(x, w);
    at::Tensor x2 = x.reshape({rows, w.size(0)});
    at::Tensor out = at::empty({rows, w.size(1)}, x.options());
    at::Tensor wt = w.t();
    for (int64_t r = 0; r < rows; r++) {
        at::Tensor o = out.select(0, r);
        at::mv_out(o, wt, x2.select(0, r));
    }
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(1);
    return out.view(shape);
}

/* self + alpha * other written into self, which the graph rewrite (bias_in_place) has shown
 * nothing else reads, when add_ answers what add does: the result keeps self's dtype (matmul
 * skips its dtype check for an empty input, so a product of an int64 batch of no rows is int64),
 * other broadcasts into self's shape, and self is plain writable memory (not a ZeroTensor, no
 * overlap). Otherwise add. */
at::Tensor bias_add_(at::Tensor self, const at::Tensor &other, const at::Scalar &alpha)
{
    bool fits = self.layout() == at::kStrided && !self._is_zerotensor() &&
                self.is_non_overlapping_and_dense() &&
                at::result_type(self, other) == self.scalar_type() && other.dim() <= 1 &&
                (other.numel() == 1 || (self.dim() >= 1 && self.size(-1) == other.numel()));
    if (!fits)
        return at::add(self, other, alpha);
    return self.add_(other, alpha);
}

TORCH_LIBRARY(torchserve_c, m)
{
    m.def("few_rows_matmul(Tensor self, Tensor other) -> Tensor", &few_rows_matmul);
    m.def("bias_add_(Tensor(a!) self, Tensor other, Scalar alpha) -> Tensor(a!)", &bias_add_);
}

c10::Symbol few_rows_op()
{
    static const c10::Symbol op = c10::Symbol::fromQualString("torchserve_c::few_rows_matmul");
    return op;
}

c10::Symbol bias_add_op()
{
    static const c10::Symbol op = c10::Symbol::fromQualString("torchserve_c::bias_add_");
    return op;
}

/* Calls rewrite(node) for each node of b, the node's sub-blocks first; rewrite may replace the
 * node (replace_with). The sum of what it returns. */
template <typename F> int rewrite_nodes(torch::jit::Block *b, const F &rewrite)
{
    int n = 0;
    for (auto it = b->nodes().begin(); it != b->nodes().end();) {
        torch::jit::Node *node = *it++;
        for (torch::jit::Block *sub : node->blocks())
            n += rewrite_nodes(sub, rewrite);
        n += rewrite(node);
    }
    return n;
}

/* Puts op(args, kwargs) in node's place: what read node's output reads the new value. */
void replace_with(torch::jit::Node *node, c10::Symbol op, at::ArrayRef<torch::jit::NamedValue> args,
                  at::ArrayRef<torch::jit::NamedValue> kwargs = {})
{
    torch::jit::WithInsertPoint guard(node);
    torch::jit::Value *v = node->owningGraph()->insert(op, args, kwargs);
    v->setType(node->output()->type());
    node->output()->replaceAllUsesWith(v);
    node->destroy();
}

/* v's value when it is a constant tensor. */
c10::optional<at::Tensor> constant_tensor(torch::jit::Value *v)
{
    c10::optional<c10::IValue> c = torch::jit::toIValue(v);
    /* a oneDNN weight (TSH_OPT_INFERENCE) is an opaque tensor: no pass below takes one */
    if (!c || !c->isTensor() || c->toTensor().layout() != at::kStrided)
        return c10::nullopt;
    return c->toTensor();
}

/* Rewrites aten::matmul(x, C), C a 2-D floating constant of FEW_ROWS_MIN_NUMEL elements or
 * more (the transposed weight of a linear, after the frozen-linear pass), to
 * torchserve_c::few_rows_matmul; the count. */
int rewrite_few_rows(torch::jit::Block *b)
{
    return rewrite_nodes(b, [](torch::jit::Node *node) {
        if (node->kind() != torch::jit::aten::matmul || node->inputs().size() != 2)
            return 0;
        c10::optional<at::Tensor> w = constant_tensor(node->input(1));
        if (!w || w->dim() != 2 || w->numel() < FEW_ROWS_MIN_NUMEL || !w->device().is_cpu() ||
            (w->scalar_type() != at::kFloat && w->scalar_type() != at::kDouble))
            return 0;
        replace_with(node, few_rows_op(), {node->input(0), node->input(1)});
        return 1;
    });
}

/* Whether p is a product of two tensors (matmul or few_rows_matmul), which allocates its
 * result. */
bool is_product(const torch::jit::Node *p)
{
    return (p->kind() == torch::jit::aten::matmul || p->kind() == few_rows_op()) &&
           p->inputs().size() == 2;
}

/* Whether v is new memory that one node alone reads, made in block b each time that node runs
 * (so not once before a loop that reads it on every turn): a product, or bias_add_'s sum into
 * such a product. */
bool fresh_for_one(torch::jit::Value *v, const torch::jit::Block *b)
{
    torch::jit::Node *p = v->node();
    if (p->owningBlock() != b || v->uses().size() != 1)
        return false;
    if (is_product(p))
        return true;
    if (p->kind() == bias_add_op())
        return fresh_for_one(p->input(0), b);
    return false;
}

/* The frozen-linear pass's bias add, aten::add(P, b), becomes bias_add_ (above) when P is a
 * fresh_for_one product by a constant and b a constant that add_ can take for every input of
 * the product's dtype: b of the constant's dtype (no type promotion), of at most one dimension,
 * of one element or of the product's last size (broadcasting never grows P). bias_add_ checks
 * again at run time, for the inputs that matmul lets through unchecked. Writing into P saves an
 * allocation and a pass over a new tensor, with the same float operations. The count. */
int bias_in_place(torch::jit::Block *b)
{
    return rewrite_nodes(b, [](torch::jit::Node *node) {
        if (node->kind() != torch::jit::aten::add || node->inputs().size() != 3)
            return 0;
        torch::jit::Value *prod = node->input(0);
        torch::jit::Node *p = prod->node();
        if (!is_product(p) || !fresh_for_one(prod, node->owningBlock()))
            return 0;
        c10::optional<at::Tensor> w = constant_tensor(p->input(1));
        c10::optional<at::Tensor> bias = constant_tensor(node->input(1));
        if (!w || !bias || w->dim() != 2 || bias->dim() > 1 ||
            bias->scalar_type() != w->scalar_type() || !bias->device().is_cpu() ||
            !w->device().is_cpu() || (bias->numel() != 1 && bias->numel() != w->size(1)))
            return 0;
        replace_with(node, bias_add_op(), {prod, node->input(1), node->input(2)});
        return 1;
    });
}

/* Activations whose in-place form takes the same arguments and runs the same kernel on its
 * input: relu_ for relu, and so on. */
const char *const activations[] = {"relu", "relu6",   "leaky_relu", "hardtanh",   "elu",
                                   "selu", "celu",    "gelu",       "silu",       "mish",
                                   "tanh", "sigmoid", "hardswish",  "hardsigmoid"};

/* The in-place form of one of the activations above, or no symbol. */
c10::optional<c10::Symbol> in_place_activation(torch::jit::Node *node)
{
    static const std::vector<std::pair<c10::Symbol, c10::Symbol>> pairs = [] {
        std::vector<std::pair<c10::Symbol, c10::Symbol>> v;
        for (const char *a : activations)
            v.emplace_back(c10::Symbol::fromQualString(std::string("aten::") + a),
                           c10::Symbol::fromQualString(std::string("aten::") + a + "_"));
        return v;
    }();
    for (const auto &p : pairs)
        if (node->kind() == p.first)
            return p.second;
    return c10::nullopt;
}

/* An activation writes into its input when that is bias_add_'s fresh_for_one result with a
 * floating bias, always plain new memory of a floating dtype, which each in-place form keeps,
 * computing the same.
 * Not torch's FunctionalToInplaceActivation: it takes the result of ops that hand back their
 * input (type_as, alpha_dropout in eval) for new memory, rewrites inside loops what was made
 * before them, and asserts on activations without an in-place form (prelu). */
int activation_in_place(torch::jit::Block *b)
{
    return rewrite_nodes(b, [](torch::jit::Node *node) {
        c10::optional<c10::Symbol> in_place = in_place_activation(node);
        const c10::FunctionSchema *fs = in_place ? node->maybeSchema() : nullptr;
        /* the functional overload only: sigmoid.out(self, *, out) writes into out */
        if (!fs || !fs->overload_name().empty() || fs->is_mutable() || node->inputs().empty() ||
            fs->arguments().size() != node->inputs().size() ||
            node->input(0)->node()->kind() != bias_add_op() ||
            !fresh_for_one(node->input(0), node->owningBlock()))
            return 0;
        /* a floating bias makes a floating sum: bias_add_ adds in place only without
         * promotion, matmul refuses an integer input against a floating weight, and the
         * integer product of an empty integer batch, which it lets through, gets add's
         * promoted sum; an integer sum would stay integer in sigmoid_, where sigmoid
         * answers in float */
        c10::optional<at::Tensor> bias = constant_tensor(node->input(0)->node()->input(1));
        if (!bias || !at::isFloatingType(bias->scalar_type()))
            return 0;
        /* the same arguments, by name where the schema wants them so (gelu's approximate) */
        std::vector<torch::jit::NamedValue> args, kwargs;
        for (size_t i = 0; i < node->inputs().size(); i++) {
            const c10::Argument &a = fs->arguments()[i];
            if (a.kwarg_only())
                kwargs.emplace_back(a.name(), node->input(i));
            else
                args.emplace_back(node->input(i));
        }
        replace_with(node, *in_place, args, kwargs);
        return 1;
    });
}

} // namespace

int tsh_freeze(struct tsh_model *m, int level, struct tsh_freeze_info *info, char **err)
{
    *info = tsh_freeze_info{};
    return guarded(err, [&] {
        if (level != TSH_OPT_FREEZE && level != TSH_OPT_INFERENCE)
            throw std::invalid_argument("unknown optimization level " + std::to_string(level));
        bool inference = level == TSH_OPT_INFERENCE;
        /* at TSH_OPT_FREEZE optimize_numerics is off: no conv/batchnorm folding, which would
         * change the answers by more than a summation order */
        torch::jit::Module frozen = torch::jit::freeze(m->mod, c10::nullopt, inference);
        std::shared_ptr<torch::jit::Graph> g = frozen.get_method("forward").graph();
        graph_weights before = weights_of(g);
        if (inference) {
            /* torch.jit.optimize_for_inference's passes, in its order; the first does
             * something only where cuDNN is */
            torch::jit::FuseFrozenConvAddRelu(g);
            torch::jit::ConvertFrozenOpsToMKLDNN(g);
        }
        torch::jit::FrozenLinearTranspose(g);
        /* the pass makes one transposed copy per call, and freezing unrolls loops: a layer
         * applied n times (or a traced loop, or tied weights) would hold n copies */
        torch::jit::ConstantPooling(g);
        /* the untransposed weights' constants, now unused, would keep a second copy alive */
        torch::jit::EliminateDeadCode(g);
        info->few_rows = rewrite_few_rows(g->block());
        info->in_place = bias_in_place(g->block());
        info->in_place += activation_in_place(g->block());
        graph_weights after = weights_of(g);
        info->transposed = before.linear - after.linear;
        info->onednn = after.onednn;
        info->bytes = after.bytes;
        info->extra_bytes = after.bytes > before.bytes ? after.bytes - before.bytes : 0;
        /* a weight that something other than a linear also reads (an embedding tied to the
         * output layer) stays, and its transposed copy comes on top: not worth it */
        if (info->extra_bytes == 0) {
            m->mod = frozen;
            /* graphs captured so far ran the module as it was */
            if (m->graphs)
                m->graphs.reset(new tsh_device::graphs(m->max_graphs));
        }
    });
}

int tsh_xnnpack(struct tsh_model *m, const char *const *methods, size_t nmethods, int *linears,
                char **err)
{
    *linears = 0;
    return guarded(err, [&] {
        if (!m->dev.is_cpu())
            throw std::invalid_argument("XNNPACK runs on the CPU; the model is on " + m->dev.str());
        if (!c10::Dispatcher::singleton().findSchema({"prepacked::linear_clamp_run", ""}))
            throw std::runtime_error("this libtorch was built without XNNPACK");
        /* OpenMP's idle threads spin for the core XNNPACK's pool then wants: tiny_gpt's
         * 128-token step took 128 ms on two of each instead of 7 on one */
        if (at::get_num_threads() > 1)
            throw std::invalid_argument("XNNPACK needs worker_threads: 1 (with " +
                                        std::to_string(at::get_num_threads()) +
                                        ", its threads and OpenMP's contend for the cores)");
        std::vector<std::string> keep(methods, methods + nmethods);
        /* torch.utils.mobile_optimizer's prepack steps, on these methods: freeze, each
         * aten::linear (and 2-D convolution) with a constant weight to a prepack and a run, the
         * prepacks run once and kept as attributes (the passes themselves: the optimizer's
         * options differ between torch versions) */
        torch::jit::Module opt = torch::jit::freeze_module(m->mod, keep);
        torch::jit::insertPrePackedOps(opt);
        opt = torch::jit::freeze_module(opt, keep);
        torch::jit::FoldPrePackingOps(opt);
        int n = 0;
        for (const std::string &name : keep) {
            std::shared_ptr<torch::jit::Graph> g = opt.get_method(name).graph();
            torch::jit::ConstantPooling(g);
            torch::jit::EliminateDeadCode(g);
            n += prepacked_runs(g->block());
        }
        m->mod = opt;
        *linears = n;
    });
}
