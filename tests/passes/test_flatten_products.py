"""A matmul of a (B..., M, K) operand and a constant (K, N) weight becomes a 2-D gemm between
reshapes, its bias add folded in (ember.passes.flatten_products): the same outputs (names kept)
for (M, K), (1, M, K), (2, 3, M, K) and symbolic leading dimensions (compiled once, run at several
sizes), a packed gemm after the pipeline, an ONNX linear layer (MatMul then Add) included; left
alone when the weight is not a constant matrix; the add stays when it is not a per-column bias
that only the product feeds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.flatten_products import flatten_products
from ember.passes.pipeline import run_pipeline

RNG = np.random.default_rng()
K, N = 128, 512  # a weight pack_weights packs: K * N >= MIN_WEIGHTS, N whole panels


def _rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def _linear(shape, bias=None, bias_first=False, weight=None, epilogue=None, extra_reader=False, product_out=False,
            k=24, n=40, dtype="float32"):
    """y = x @ w (+ bias) (-> epilogue); x of `shape` (its last axis k); `weight`: the weight's
    shape, or "input" for a second graph input."""
    g = Graph()
    x = g.add_input("x", TensorType((*shape, k), dtype))
    w = g.add_input("w", TensorType((k, n), dtype)) if weight == "input" else \
        g.add_constant(_rand(*(weight or (k, n)), dtype=dtype), "w")
    y, = add_op(g, "matmul", [x, w], name="proj", out_names=["xw"])
    product = y
    if bias is not None:
        c = g.add_input("c", TensorType(bias[1:], dtype)) if bias[:1] == ("input",) else \
            g.add_constant(_rand(*bias, dtype=dtype), "c")
        y, = add_op(g, "add", [c, y] if bias_first else [y, c], out_names=["y"])
    if epilogue is not None:
        y, = add_op(g, epilogue, [y], out_names=["out"])
    outs = [y] + ([add_op(g, "exp", [product])[0]] if extra_reader else []) + ([product] if product_out else [])
    g.set_outputs(outs)
    return g


@pytest.mark.parametrize("shape", [(9,), (1, 9), (2, 3, 9)])
@pytest.mark.parametrize("bias", [None, "(N,)", "(1, ..., N)", "()", "(1,)"])
def test_products_become_2d_gemms_with_their_bias(shape, bias):
    bias = {"(N,)": (40,), "(1, ..., N)": (1,) * len(shape) + (40,), "()": (), "(1,)": (1,)}.get(bias)
    g = _linear(shape, bias)
    out = flatten_products(g)
    assert ops(out) == (["gemm"] if len(shape) == 1 else ["reshape", "gemm", "reshape"])
    gemm = next(n for n in out.nodes if n.op == "gemm")
    assert gemm.inputs[0].shape == (int(np.prod(shape)), 24)
    assert len(gemm.inputs) == (2 if bias is None else 3)
    check_same(g, out)


@settings(max_examples=30, deadline=None)
@given(lead=st.lists(st.integers(1, 4), min_size=0, max_size=3), m=st.integers(1, 5),
       bias=st.sampled_from([None, "(N,)", "(1, ..., N)", "()"]), bias_first=st.booleans())
def test_any_leading_dims_and_bias(lead, m, bias, bias_first):
    shape = (*lead, m)
    bias = {"(N,)": (40,), "(1, ..., N)": (1,) * len(shape) + (40,), "()": ()}.get(bias)
    g = _linear(shape, bias, bias_first=bias_first)
    out = flatten_products(g)
    assert "matmul" not in ops(out) and "add" not in ops(out)
    check_same(g, out)


def test_the_bias_may_come_first():
    g = _linear((2, 9), (40,), bias_first=True)
    out = flatten_products(g)
    assert ops(out) == ["reshape", "gemm", "reshape"]
    check_same(g, out)


@pytest.mark.parametrize("case", [dict(weight="input"), dict(weight=(2, 24, 40)), dict(dtype="int32"),
                                  dict(shape=())])
def test_left_alone(case):
    """A weight that is no constant, a batched weight, integers, a vector on the left."""
    g = _linear(case.pop("shape", (2, 9)), **case)
    assert flatten_products(g) is g


@pytest.mark.parametrize("case", [dict(bias=("input", 40)), dict(bias=(9, 1)), dict(bias=(40,), extra_reader=True),
                                  dict(bias=(40,), product_out=True)])
def test_the_add_stays(case):
    """A bias that is no constant, one per row, a product read elsewhere too or a graph output."""
    g = _linear((2, 9), **case)
    out = flatten_products(g)
    assert ops(out)[:4] == ["reshape", "gemm", "reshape", "add"]
    assert len(next(n for n in out.nodes if n.op == "gemm").inputs) == 2
    check_same(g, out)


def test_products_of_one_operand_share_its_reshape():
    g = Graph()
    x = g.add_input("x", TensorType((2, 9, 24)))
    ys = [add_op(g, "matmul", [x, g.add_constant(_rand(24, n), f"w{n}")])[0] for n in (8, 16)]
    g.set_outputs(ys)
    out = flatten_products(g)
    assert ops(out) == ["reshape", "gemm", "reshape", "gemm", "reshape"]
    check_same(g, out)


def _packed(graph: Graph) -> list:
    return [n for n in graph.nodes if n.op == "gemm" and n.attrs["b_panels"]]


def test_the_pipeline_packs_the_weight():
    out = run_pipeline(_linear((1, 64), (N,), k=K, n=N, epilogue="relu"), 2)
    assert ops(out) == ["reshape", "gemm", "reshape", "relu"] and len(_packed(out)) == 1


@pytest.fixture(scope="module")
def models():
    """Compiled linear layers with a bias and an epilogue: (1, M, K), (2, 3, M, K), symbolic."""
    shapes = {"one": (1, 33), "batched": (2, 3, 7), "symbolic": ("batch", "seq")}
    graphs = {name: _linear(shape, (N,), k=K, n=N, epilogue="relu") for name, shape in shapes.items()}
    return {name: (g, ember.compile(g)) for name, g in graphs.items()}


def _expected(g: Graph, x: np.ndarray) -> np.ndarray:
    w, c = (g.constants[name].astype(np.float64) for name in ("w", "c"))
    return np.maximum(x.astype(np.float64) @ w + c, 0)


def _gemm_kernels(cm) -> list[tuple[str, ...]]:
    return [k.ops for k in cm.kernels if "gemm" in k.ops]


# the epilogue is the gemm's when the reshape after it only adds ones or splits its rows in two
# (ember.passes.fuse); split in three, it is a kernel of its own
@pytest.mark.parametrize("name, kernels", [("one", [("gemm", "reshape", "relu")]), ("batched", [("gemm",)])])
def test_compiled_static_leading_dims(models, name, kernels):
    g, cm = models[name]
    assert "matmul" not in ops(cm.graph) and len(_packed(cm.graph)) == 1 and _gemm_kernels(cm) == kernels
    x = _rand(*g.inputs[0].shape)
    np.testing.assert_allclose(cm(x), _expected(g, x), rtol=1e-4, atol=1e-4)


def test_compiled_symbolic_leading_dims_at_several_sizes(models):
    g, cm = models["symbolic"]
    assert "matmul" not in ops(cm.graph) and len(_packed(cm.graph)) == 1
    assert next(n for n in cm.graph.nodes if n.op == "gemm").inputs[0].shape == ("batch*seq", K)
    assert _gemm_kernels(cm) == [("gemm", "reshape", "relu")]
    for batch, seq in ((1, 1), (1, 17), (3, 5), (2, 64)):
        x = _rand(batch, seq, K)
        np.testing.assert_allclose(cm(x), _expected(g, x), rtol=1e-4, atol=1e-4)


def test_onnx_linear_layer_is_a_packed_gemm():
    """MatMul of a (1, S, K) activation and a (K, N) initializer, then Add of an (N,) bias: what
    torch.onnx.export writes for nn.Linear."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w, b = _rand(K, N), _rand(N)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", N])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    cm = ember.compile(model)
    assert ops(cm.graph) == ["reshape", "gemm", "reshape"] and len(_packed(cm.graph)) == 1
    assert _gemm_kernels(cm) == [("gemm", "reshape")]  # the bias is the gemm's own
    for s in (1, 12, 100):
        x = _rand(1, s, K)
        np.testing.assert_allclose(cm(x), x.astype(np.float64) @ w + b, rtol=1e-4, atol=1e-4)
