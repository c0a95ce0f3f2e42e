"""The TorchScript handler freezes its module for inference (issue 16): handler.jit_freeze.

At load the worker runs torch.jit.freeze (without numeric folding) and stores each constant
linear weight transposed, as torch.jit.optimize_for_inference does; OpenBLAS then no longer
packs every weight matrix on every call. The answers must still be torch's, for the module as
the archive holds it, within 1e-5; `handler.jit_freeze: false` serves the module as loaded; a
module that torch cannot freeze is served as loaded, with a warning naming the reason; any other
value of the key is refused when the model loads.
"""

import pytest

from conftest import mar_module, torchscript_store

TOL = 1e-5


def inputs(n, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 64, generator=g) * 4 - 2


def expected(model, x):
    import torch
    with torch.no_grad():
        return model(x).tolist()


def assert_close(got, want, what):
    diff = max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))
    assert len(got) == len(want) and diff <= TOL, f"{what}: max abs diff {diff}"


def predict_rows(s, x):
    """One request per row, 8 at a time in parallel threads so that batches form."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda row: s.post("/predictions/mlp", json={"data": row}),
                         x.tolist()))
    for r in rs:
        assert r.status_code == 200, r.text
    return [r.json() for r in rs]


# the load's log line once the module is optimized, at either level
FROZE = r"froze forward in [0-9.]+ ms \(handler\.optimize: (?:freeze|inference)\): "


def wait_frozen(s, linear, few_rows, in_place=None):
    """Waits for the load's log line with these counts: linear calls with transposed weights,
    products with a matrix-vector path, operations in place (None: any)."""
    ops = "" if in_place is None else rf", {in_place} operation\(s\) in place"
    s.wait_log(FROZE + rf"{linear} linear call\(s\) with transposed "
                rf"weights, [0-9.]+ MiB of constants, {few_rows} product\(s\) with a "
                rf"matrix-vector path for few rows{ops}")


@pytest.mark.smoke
def test_frozen_by_default_and_answers_like_torch(server_factory):
    s = server_factory(models=["mlp"], yaml={"mlp": {"batchSize": 8, "maxBatchDelay": 20}})
    s.wait_ready("mlp")
    # mlp's three nn.Linear all rewritten; its 85,002 floats are 0.3 MiB; its largest weight
    # (256x256) is below the matrix-vector path's 1M elements
    s.wait_log(r"froze forward in [0-9.]+ ms \(handler\.optimize: inference\): "
                r"3 linear call\(s\) with transposed weights, "
                r"0\.3 MiB of constants, 0 product\(s\) with a matrix-vector path for few rows, "
                r"5 operation\(s\) in place")
    ref = mar_module("mlp")
    x = inputs(40, 1)
    assert_close(predict_rows(s, x), expected(ref, x), "frozen mlp, batches of up to 8")
    r = s.post("/predictions/mlp", json={"data": x[:5].tolist()})  # one request of 5 rows
    assert r.status_code == 200, r.text
    assert_close(r.json(), expected(ref, x[:5]), "frozen mlp, 5 rows in one request")


def test_jit_freeze_false_serves_the_module_as_loaded(server_factory):
    s = server_factory(models=["mlp"], yaml={"mlp": {"handler": {"jit_freeze": False}}})
    s.wait_ready("mlp")
    s.wait_log(r"serving forward as loaded \(handler\.optimize: none\)")
    assert "froze forward" not in s.log()
    ref = mar_module("mlp")
    x = inputs(8, 2)
    assert_close(predict_rows(s, x), expected(ref, x), "mlp as loaded")


def test_jit_freeze_other_values_are_refused(server_factory):
    s = server_factory(models=["mlp"], yaml={"mlp": {"handler": {"jit_freeze": "maybe"}}},
                       load=False, config={"enable_model_api": "true"})
    r = s.post("/models?url=mlp&initial_workers=1&synchronous=true", api="management")
    assert r.status_code == 500, r.text
    assert 'handler.jit_freeze: "maybe" is not true or false' in r.json()["message"], r.text
    assert s.get("/models/mlp", api="management").status_code == 404


def test_jit_freeze_as_a_list_is_refused(server_factory):
    s = server_factory(models=["mlp"], yaml={"mlp": {"handler": {"jit_freeze": [False]}}},
                       load=False, config={"enable_model_api": "true"})
    r = s.post("/models?url=mlp&initial_workers=1&synchronous=true", api="management")
    assert r.status_code == 500, r.text
    assert 'handler.jit_freeze: "[...]" is not true or false' in r.json()["message"], r.text


def serve_module(server_factory, tmp_path, m):
    """Serves the scripted module m as model "mlp" (64 inputs per row), batchSize 1."""
    store = torchscript_store(tmp_path, "mlp", m,
                              "minWorkers: 1\nmaxWorkers: 1\nhandler:\n  input_shape: [64]\n")
    s = server_factory(models=["mlp"], store=store)
    s.wait_ready("mlp")
    return s


def assert_serves(s, m, x):
    for rows in (x[:1], x[:2], x):
        r = s.post("/predictions/mlp", json={"data": rows.tolist()})
        assert r.status_code == 200, r.text
        assert_close(r.json(), expected(m, rows), f"{len(rows)} rows")


def post_exact(s, x, want, what, group=1):
    """Posts the rows x as one request: the answer must be want bit for bit. The worker prints
    floats with 9 significant digits, which read back to the same float32. On a mismatch the
    message names the differing columns, in groups of `group` (one per layer of that width)."""
    import torch
    r = s.post("/predictions/mlp", json={"data": x.tolist()})
    assert r.status_code == 200, r.text
    got = torch.tensor(r.json(), dtype=want.dtype)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, not {tuple(want.shape)}"
    cols = (got != want).nonzero()[:, 1].div(group, rounding_mode="floor").tolist()
    assert torch.equal(got, want), \
        f"{what}: max abs diff {(got - want).abs().max().item()} in {sorted(set(cols))}"
    return r.json()


def test_a_layer_applied_many_times_keeps_one_weight(server_factory, tmp_path):
    """Freezing unrolls the loop into 12 linear calls on one weight: the transposed weight must
    be one constant (4 MiB), not twelve."""
    import torch
    from torch import nn

    class Repeat(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(64, 1024)
            self.fc = nn.Linear(1024, 1024)
            self.down = nn.Linear(1024, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.up(x)
            for _ in range(12):
                h = torch.tanh(self.fc(h))
            return self.down(h)

    torch.manual_seed(0)
    m = torch.jit.script(Repeat().eval())
    s = serve_module(server_factory, tmp_path, m)
    # 64x1024 + 1024x1024 + 1024x3 floats and their biases: 4.3 MiB, once; the twelve calls
    # of the 1024x1024 layer (1M elements) take the matrix-vector path for up to four rows
    s.wait_log(FROZE + r"14 linear call\(s\) with transposed weights, "
                r"4\.3 MiB of constants, 12 product\(s\) with a matrix-vector path for few rows")
    x = inputs(5, 4)
    assert_serves(s, m, x)  # 1, 2 and 5 rows: mv, mv, matmul
    for rows in (x[:3], x[:4]):  # the last two row counts of the matrix-vector path
        r = s.post("/predictions/mlp", json={"data": rows.tolist()})
        assert r.status_code == 200, r.text
        assert_close(r.json(), expected(m, rows), f"{len(rows)} rows")


def test_large_products_of_few_rows_answer_like_torch(server_factory, tmp_path):
    """Products by a constant of 1M elements or more take one matrix-vector call per row when
    the input has up to four rows, and matmul otherwise: one row, two rows, batches of up to 8
    formed from single-row requests and 24 rows all answer as torch does for the module as
    archived. A matmul by a constant that is not a linear's weight (here 2048x512, as written
    in forward) takes the path too; products by smaller constants (64x512, 512x5) do not."""
    import torch
    from torch import nn

    class Wide(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(64, 512)
            self.mid = nn.Linear(512, 2048)
            self.proj = nn.Parameter(torch.randn(2048, 512) / 45)
            self.down = nn.Linear(512, 5, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.mid(torch.relu(self.up(x))))
            return self.down(torch.matmul(h, self.proj))

    torch.manual_seed(0)
    m = torch.jit.script(Wide().eval())
    store = torchscript_store(tmp_path, "mlp", m, "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 8\n"
                              "maxBatchDelay: 20\nhandler:\n  input_shape: [64]\n")
    s = server_factory(models=["mlp"], store=store)
    s.wait_ready("mlp")
    # 64x512 and 512x5 stay with matmul; 512x2048 (the linear) and 2048x512 (the parameter)
    # switch
    wait_frozen(s, 3, 2)
    x = inputs(24, 6)
    assert_serves(s, m, x)
    assert_close(predict_rows(s, x), expected(m, x), "single-row requests, batches of up to 8")
    for row in x[:4]:  # one at a time: a batch of one row each
        r = s.post("/predictions/mlp", json={"data": row.tolist()})
        assert r.status_code == 200, r.text
        assert_close([r.json()], expected(m, row[None]), "one row on its own")


# the worker's products, computed by torch in a child process with the worker's environment:
# OMP_NUM_THREADS=1 (what the frontend spawns workers with), which OpenBLAS also reads for its
# own thread count
WORKER_PRODUCTS = """
import sys, torch
torch.set_num_threads(1)
w = torch.load(sys.argv[1])
up_t = w["up.weight"].t().contiguous()
big_t = w["big.weight"].t().contiguous()
out = {}
with torch.no_grad():
    for n in range(1, 6):
        x = w["x"][:n]
        h = torch.relu(torch.matmul(x, up_t) + w["up.bias"])
        out[n] = (torch.stack([torch.mv(big_t.t(), row) for row in h]) + w["big.bias"],
                  torch.matmul(h, big_t) + w["big.bias"])
torch.save(out, sys.argv[2])
"""


def test_few_rows_take_the_matrix_vector_call_at_request_time(server_factory, tmp_path):
    """The answers must be bit for bit those of one torch.mv per row for 1 to 4 rows, and
    those of torch.matmul for 5: the two differ in their last bits (different summation
    orders), so this shows which path the worker took for each request, which the log's count
    of rewritten products and a 1e-5 comparison cannot.

    The reference repeats every product the worker makes with the worker's shapes and the
    worker's BLAS threads: OpenBLAS chooses its kernel and how it splits the work between
    threads from the shape and the thread count, so row 1 of a 4-row product need not equal
    row 1 of a 5-row one, nor a product on two threads the same product on one (measured here:
    2e-7 apart in the 64x1024 layer's output)."""
    import os
    import subprocess
    import torch
    from torch import nn

    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(64, 1024)
            self.big = nn.Linear(1024, 1024)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.big(torch.relu(self.up(x)))[:, :16]

    torch.manual_seed(0)
    m = Big().eval()
    s = serve_module(server_factory, tmp_path, torch.jit.script(m))
    wait_frozen(s, 2, 1, 3)  # the two bias adds, the relu between them
    x = inputs(5, 8)
    weights = dict(m.state_dict(), x=x)
    torch.save(weights, str(tmp_path / "weights.pt"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(["/usr/bin/python3", "-c", WORKER_PRODUCTS, str(tmp_path / "weights.pt"),
                    str(tmp_path / "products.pt")], env=env, check=True, timeout=120)
    products = torch.load(str(tmp_path / "products.pt"))
    for n in range(1, 6):
        by_mv, by_matmul = (p[:, :16] for p in products[n])
        assert not torch.equal(by_mv, by_matmul), \
            f"{n} rows: mv and matmul agree bit for bit, so this test cannot tell them apart"
        post_exact(s, x[:n], by_mv if n <= 4 else by_matmul,
                   f"{n} rows, not the {'mv' if n <= 4 else 'matmul'} answer")


def test_a_bias_add_writes_into_a_product_only_where_add_would_answer_the_same(server_factory,
                                                                                tmp_path):
    """A product by a constant that only its bias add reads gets the add in place (add_): the
    mlp's three biases. It must not where add_ would answer differently: a product that is
    read again after the add, a bias of another dtype (add promotes to double, add_ would
    stay float) and a bias that broadcasting makes wider than the product (add_ fails). The
    answers are compared bit for bit with torch's."""
    import torch
    from torch import nn

    class Adds(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 8)
            self.p = nn.Parameter(torch.randn(64, 8))
            self.b = nn.Parameter(torch.randn(8))
            self.q = nn.Parameter(torch.randn(64, 8))
            self.b64 = nn.Parameter(torch.randn(8, dtype=torch.float64))
            self.r = nn.Parameter(torch.randn(64, 1))
            self.b5 = nn.Parameter(torch.randn(5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)  # frozen: matmul, then the bias add in place, then relu_
            p = torch.matmul(x, self.p)
            read_twice = (p + self.b) * p
            promoted = torch.matmul(x, self.q) + self.b64
            widened = torch.matmul(x, self.r) + self.b5
            return torch.cat([torch.relu(y).double(), read_twice.double(), promoted,
                              widened.double()], dim=1)

    torch.manual_seed(0)
    m = torch.jit.script(Adds().eval())
    s = serve_module(server_factory, tmp_path, m)
    wait_frozen(s, 1, 0, 2)  # the linear's bias add and the relu on its result, nothing else
    torch.set_num_threads(1)
    for n in (1, 3):
        x = inputs(n, 9)
        with torch.no_grad():
            want = m(x)
        assert want.dtype == torch.float64 and want.shape == (n, 29)
        post_exact(s, x, want, f"{n} rows, columns")


def test_activations_after_a_bias_add_write_into_it_and_answer_bit_for_bit(server_factory,
                                                                            tmp_path):
    """Each activation that has an in-place form with the same arguments writes into the bias
    add before it (relu_, gelu_ with approximate by name, leaky_relu_ with its slope, ...):
    14 bias adds and 14 activations in place. The answers are compared bit for bit with torch
    computing what the frozen graph computes before the activation (the product by the
    transposed weight, then the bias add), then the activation out of place; 13 outputs each,
    a vector of 8 and a tail."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    acts = [torch.relu, F.relu6, lambda t: F.leaky_relu(t, 0.2),
            lambda t: F.hardtanh(t, -0.5, 0.5), lambda t: F.elu(t, 0.7), F.selu,
            lambda t: F.celu(t, 1.3), lambda t: F.gelu(t, approximate="tanh"), F.silu, F.mish,
            torch.tanh, torch.sigmoid, F.hardswish, F.hardsigmoid]

    class Acts(nn.Module):
        def __init__(self):
            super().__init__()
            self.fcs = nn.ModuleList([nn.Linear(64, 13) for _ in range(14)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            fc = self.fcs
            return torch.cat([torch.relu(fc[0](x)), F.relu6(fc[1](x)),
                              F.leaky_relu(fc[2](x), 0.2), F.hardtanh(fc[3](x), -0.5, 0.5),
                              F.elu(fc[4](x), 0.7), F.selu(fc[5](x)), F.celu(fc[6](x), 1.3),
                              F.gelu(fc[7](x), approximate="tanh"), F.silu(fc[8](x)),
                              F.mish(fc[9](x)), torch.tanh(fc[10](x)),
                              torch.sigmoid(fc[11](x)), F.hardswish(fc[12](x)),
                              F.hardsigmoid(fc[13](x))], dim=1)

    torch.manual_seed(0)
    module = Acts().eval()
    m = torch.jit.script(module)
    s = serve_module(server_factory, tmp_path, m)
    wait_frozen(s, 14, 0, 28)
    torch.set_num_threads(1)
    for n in (1, 3):
        x = inputs(n, 11)
        with torch.no_grad():
            want = torch.cat([act(torch.matmul(x, fc.weight.t().contiguous()) + fc.bias)
                              for act, fc in zip(acts, module.fcs)], dim=1)
            got = post_exact(s, x, want, f"{n} rows, activations", group=13)
            assert_close(got, m(x).tolist(), f"{n} rows, against the module")


def test_nothing_is_written_in_place_that_is_read_again(server_factory, tmp_path):
    """A bias add in a loop whose product was made before the loop would add the bias into the
    product once per turn, and a leaky_relu in a loop on a sum made before it would scale its
    negative values once per turn; alpha_dropout in eval hands back its input, so a relu on its
    result must not write into a tensor that is still read; PReLU has no in-place form, and the
    module must still be frozen; sigmoid_ of an integer sum would fail where sigmoid answers in
    float; sigmoid with out= is not sigmoid_, and the module must still be frozen. Found by
    review: the first three went wrong with torch's FunctionalToInplaceActivation or a bias add
    rewritten across blocks, the last failed the freeze (so the module was served as loaded)."""
    import torch
    from torch import nn

    class Hazards(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 4)
            self.fc2 = nn.Linear(64, 4)
            self.fc3 = nn.Linear(64, 4)
            self.w = nn.Parameter(torch.randn(64, 4))
            self.b = nn.Parameter(torch.ones(4))
            self.drop = nn.AlphaDropout(0.1)
            self.act = nn.PReLU()
            self.register_buffer("wi", torch.randint(-3, 4, (64, 4)))
            self.register_buffer("bi", torch.randint(-3, 4, (4,)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            h2 = self.fc2(x)  # its bias add before the loop, its leaky_relu on every turn
            p = torch.matmul(x, self.w)  # made once, read on every turn of the loop
            out = torch.zeros(x.shape[0], 4)
            leaky = torch.zeros(x.shape[0], 4)
            for _ in range(x.shape[0] + 2):  # not a constant: freezing keeps the loop
                out = out + (p + self.b)
                leaky = leaky + torch.nn.functional.leaky_relu(h2, 0.2)
            r = h + torch.relu(self.drop(h))
            # an integer sum: sigmoid answers in float, sigmoid_ would have to stay integer
            ints = torch.sigmoid(torch.matmul(x.long(), self.wi) + self.bi)
            # sigmoid.out writes into its out argument: not the functional overload
            into = torch.empty(x.shape[0], 4)
            torch.sigmoid(self.fc3(x), out=into)
            return torch.cat([out, r, self.act(h), leaky, ints, into], dim=1)

    torch.manual_seed(0)
    m = torch.jit.script(Hazards().eval())
    s = serve_module(server_factory, tmp_path, m)
    wait_frozen(s, 3, 0, 4)  # the three linears' own bias adds and the integer one, no activation
    for n in (1, 3):
        x = inputs(n, 10)
        r = s.post("/predictions/mlp", json={"data": x.tolist()})
        assert r.status_code == 200, r.text
        assert_close(r.json(), expected(m, x), f"{n} rows")


def test_an_empty_batch_of_another_dtype_answers_as_torch_does(server_factory, tmp_path):
    """matmul checks dtypes only when there are rows: a product of an INT64 batch of no rows is
    an empty int64 tensor, which add promotes to float32 with the bias and add_ could not. The
    bias add written into the product must then fall back to add, at run time (found by
    review: the server answered 400 "result type Float can't be cast to the desired output type
    Long" where torch and jit_freeze: false answer an empty FP32 [0, 4])."""
    import torch
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 4))
            self.b = nn.Parameter(torch.randn(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(torch.matmul(x, self.w) + self.b)

    torch.manual_seed(0)
    m = torch.jit.script(M().eval())
    store = torchscript_store(tmp_path, "m", m)
    s = server_factory(models=["m"], store=store)
    s.wait_ready("m")
    wait_frozen(s, 0, 0, 2)  # the bias add and the relu after it
    with torch.no_grad():
        want = m(torch.zeros(0, 3, dtype=torch.int64))
    assert want.dtype == torch.float32 and want.shape == (0, 4)
    r = s.post("/v2/models/m/infer", json={"inputs": [
        {"name": "x", "shape": [0, 3], "datatype": "INT64", "data": []}]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert (out["datatype"], out["shape"], out["data"]) == ("FP32", [0, 4], []), out
    # and a float row still takes the in-place path and answers like torch
    x = torch.tensor([[0.5, -1.0, 2.0]])
    r = s.post("/v2/models/m/infer", json={"inputs": [
        {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": x.flatten().tolist()}]})
    assert r.status_code == 200, r.text
    with torch.no_grad():
        assert_close([r.json()["outputs"][0]["data"]], m(x).tolist(), "one float row")


def test_a_sparse_input_to_a_large_product_takes_matmul(server_factory, tmp_path):
    """The matrix-vector path reshapes its input, which a sparse tensor refuses: a sparse input
    of one row must go to matmul, as in the module as archived, instead of failing."""
    import torch
    from torch import nn

    class SparseIn(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(64, 1024)
            self.p = nn.Parameter(torch.randn(1024, 1024) / 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.matmul(torch.relu(self.up(x)).to_sparse(), self.p)[:, :4]

    torch.manual_seed(0)
    m = torch.jit.script(SparseIn().eval())
    s = serve_module(server_factory, tmp_path, m)
    wait_frozen(s, 1, 1)
    assert_serves(s, m, inputs(3, 7))


def test_a_weight_read_elsewhere_too_is_served_as_loaded(server_factory, tmp_path):
    """A linear weight that a matmul reads as well would be held twice (as it is and
    transposed): the module is served as loaded."""
    import torch
    from torch import nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 512)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return torch.matmul(h, self.fc.weight)[:, :3]

    torch.manual_seed(0)
    m = torch.jit.script(Tied().eval())
    s = serve_module(server_factory, tmp_path, m)
    s.wait_log(r"serving forward as loaded: its transposed linear weights would hold 0\.1 MiB "
                r"more \(a weight that something else reads too\)")
    assert "froze forward" not in s.log()
    assert_serves(s, m, inputs(3, 5))


def test_a_module_torch_cannot_freeze_is_served_as_loaded(server_factory, tmp_path):
    """An nn.ModuleList indexed by a value known only at run time (prim::ModuleContainerIndex)
    is one thing torch.jit.freeze refuses."""
    import torch
    from torch import nn

    @torch.jit.interface
    class LinearLike(nn.Module):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            pass

    class Pick(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(64, 3), nn.Linear(64, 3)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            layer: LinearLike = self.layers[int(x.shape[0]) % 2]
            return layer.forward(x)

    torch.manual_seed(0)
    m = torch.jit.script(Pick().eval())
    s = serve_module(server_factory, tmp_path, m)
    s.wait_log(r"cannot optimize forward \(handler\.optimize: inference\), serving it as "
                r"loaded: .*ModuleContainerIndex")
    assert_serves(s, m, inputs(3, 3))  # 1 and 3 rows pick one layer, 2 rows the other
