"""Indices read at run time out of their axis: every indexing operator of both frontends, compiled
(target "c") and interpreted (target "python"), raises IndexOutOfRangeError naming the kernel, its
nodes, the index and the axis size, where it used to read or write outside its tensors (garbage,
or SIGSEGV for a huge index); in-range indices, negative ones included, give the reference's
results. Each case runs in a child process: a crash is a failed assertion."""

from __future__ import annotations

import numpy as np
import pytest

TORCH = r"""
import sys
import numpy as np
import torch
import ember
from ember.errors import IndexOutOfRangeError

target = sys.argv[1]
rng = np.random.default_rng(0)
torch.manual_seed(0)


class Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(50, 6)

    def forward(self, i):
        return self.table(i)


class IndexSelect(torch.nn.Module):
    def forward(self, x, i):
        return torch.index_select(x, 1, i) * 2


class Gather(torch.nn.Module):
    def forward(self, x, i):
        return torch.gather(x, 1, i) + 1


def indices(low, high, shape, dtype):
    return torch.from_numpy(rng.integers(low, high, shape)).to(dtype)


cases = [  # module, inputs, which input holds the indices, the size of the axis it indexes
    (Embedding(), lambda dt: (indices(-50, 50, (3, 7), dt),), 0, 50),
    (IndexSelect(), lambda dt: (torch.randn(4, 9), indices(-9, 9, (11,), dt)), 1, 9),
    (Gather(), lambda dt: (torch.randn(5, 8), indices(-8, 8, (5, 6), dt)), 1, 8),
]
for module, make, k, n in cases:
    for dtype in (torch.int64, torch.int32):
        args = make(dtype)
        cm = ember.compile(module, args, target=target)
        with torch.no_grad():
            for _ in range(3):  # fresh in-range indices, negative ones included
                args = make(dtype)
                want = module(*[a if j != k else torch.where(a < 0, a + n, a) for j, a in enumerate(args)])
                np.testing.assert_allclose(np.asarray(cm(*args)), want.numpy(), rtol=1e-6, atol=1e-6)
        big = 2**31 - 1 if dtype == torch.int32 else 2**62
        for bad in (n, -n - 1, big, -big):
            args = list(make(dtype))
            flat = args[k].view(-1)
            flat[int(rng.integers(flat.numel()))] = bad
            try:
                cm(*args)
            except IndexOutOfRangeError as e:
                assert e.index == bad and e.size == n, (e.index, e.size, str(e))
                assert f"index {bad} is out of range for an axis of size {n}" in str(e), str(e)
                assert type(module).__name__.lower().replace("select", "") in str(e).replace("_", ""), str(e)
            else:
                raise AssertionError(f"{type(module).__name__} {dtype}: index {bad} gave no error")
        with torch.no_grad():  # the model is still right after an error
            args = make(dtype)
            want = module(*[a if j != k else torch.where(a < 0, a + n, a) for j, a in enumerate(args)])
            np.testing.assert_allclose(np.asarray(cm(*args)), want.numpy(), rtol=1e-6, atol=1e-6)
print("ok")
"""

ONNX = r"""
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
import ember
from ember.errors import IndexOutOfRangeError

target = sys.argv[1]
rng = np.random.default_rng(1)
F, I = TensorProto.FLOAT, TensorProto.INT64


def model(op, inputs, out_shape, **attrs):
    node = helper.make_node(op, [name for name, _, _ in inputs], ["y"], name=f"the_{op}", **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(name, t, shape) for name, t, shape in inputs],
                              [helper.make_tensor_value_info("y", F, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def data(shape):
    return rng.standard_normal(shape).astype(np.float32)


def nd_indices(count, dims):  # distinct in-range index vectors (a scatter's targets), negative ones too
    flat = rng.permutation(int(np.prod(dims)))[:count]
    idx = np.stack(np.unravel_index(flat, dims), -1)
    return np.where(rng.random(idx.shape) < 0.5, idx - np.array(dims), idx).astype(np.int64)


def rows_indices(shape, n):  # per row of axis 1, distinct in-range positions (scatter_elements)
    return np.stack([rng.permutation(n)[:shape[1]] - n * (rng.random(shape[1]) < 0.5) for _ in range(shape[0])])


cases = [  # model, inputs (a function), the indices' input, the size its entries index
    (model("Gather", [("x", F, [6, 10]), ("i", I, [4, 3])], [6, 4, 3], axis=1),
     lambda: {"x": data((6, 10)), "i": rng.integers(-10, 10, (4, 3))}, "i", 10),
    (model("GatherElements", [("x", F, [5, 7]), ("i", I, [5, 4])], [5, 4], axis=1),
     lambda: {"x": data((5, 7)), "i": rng.integers(-7, 7, (5, 4))}, "i", 7),
    (model("GatherND", [("x", F, [6, 5, 3]), ("i", I, [4, 2])], [4, 3]),
     lambda: {"x": data((6, 5, 3)), "i": nd_indices(4, (6, 5))}, "i", None),
    (model("ScatterND", [("x", F, [6, 5]), ("i", I, [3, 1]), ("u", F, [3, 5])], [6, 5]),
     lambda: {"x": data((6, 5)), "i": nd_indices(3, (6,)), "u": data((3, 5))}, "i", 6),
    (model("ScatterElements", [("x", F, [4, 9]), ("i", I, [4, 3]), ("u", F, [4, 3])], [4, 9], axis=1),
     lambda: {"x": data((4, 9)), "i": rows_indices((4, 3), 9), "u": data((4, 3))}, "i", 9),
]
for proto, make, key, n in cases:
    op = proto.graph.node[0].op_type
    onnx.checker.check_model(proto)
    ref = ReferenceEvaluator(proto)
    cm = ember.compile(proto, target=target)
    for _ in range(3):
        feeds = make()
        np.testing.assert_allclose(cm(*feeds.values()), ref.run(None, feeds)[0], rtol=1e-6, atol=1e-6, err_msg=op)
    for _ in range(4):  # random out-of-range sets, huge ones included
        feeds = make()
        idx = feeds[key].reshape(-1)
        size = n or (6 if op == "GatherND" else None)
        pos = int(rng.integers(idx.size)) if op != "GatherND" else 2 * int(rng.integers(idx.size // 2))
        bad = int(rng.choice([size, -size - 1, 2**40, -2**62, 2**63 - 1, int(rng.integers(size, 10**6))]))
        idx[pos] = bad
        try:
            cm(*feeds.values())
        except IndexOutOfRangeError as e:
            assert e.index == bad and e.size == size, (op, e.index, e.size, str(e))
            assert "nodes y" in str(e), str(e)  # the node, named after its output
        else:
            raise AssertionError(f"{op}: index {bad} gave no error")
print("ok")
"""


@pytest.mark.parametrize("target", ["c", "python"])
def test_torch_indexing_out_of_range_raises(python, target):
    pytest.importorskip("torch")
    python(TORCH, args=(target,), timeout=400).assert_ok()


@pytest.mark.parametrize("target", ["c", "python"])
def test_onnx_indexing_out_of_range_raises(python, target):
    pytest.importorskip("onnx")
    python(ONNX, args=(target,), timeout=400).assert_ok()


def test_constant_indices_out_of_range_fail_the_compile():
    """Indices among the constants are folded at compile time: one out of range is the same error
    then, naming the node (it was NumPy's IndexError, or, for a scatter's index below -size, a
    second wrap-around)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import ember
    from ember.errors import IndexOutOfRangeError

    rng = np.random.default_rng(2)
    for op, indices, attrs in [("Gather", [1, 5], {}), ("GatherElements", [[0, 1, -4]], {"axis": 0}),
                               ("ScatterElements", [[-7, 0, 1, 2]], {"axis": 1})]:
        x = rng.standard_normal((3, 4)).astype(np.float32)
        inits = [numpy_helper.from_array(x, "x"), numpy_helper.from_array(np.array(indices, np.int64), "i")]
        names = ["x", "i"]
        if op == "ScatterElements":
            inits.append(numpy_helper.from_array(rng.standard_normal((1, 4)).astype(np.float32), "u"))
            names.append("u")
        nodes = [helper.make_node(op, names, ["g"], name="picked", **attrs),
                 helper.make_node("ReduceSum", ["g"], ["s"], keepdims=0),
                 helper.make_node("Add", ["s", "a"], ["y"])]
        graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        onnx.checker.check_model(model)
        with pytest.raises(IndexOutOfRangeError, match=r"picked.*index -?\d+ is out of range for an axis of size"):
            ember.compile(model)
