"""A model stored in float16 or bfloat16 between kernels, for the GPU (`ember.compile(...,
precision="fp16" | "bf16", target="cuda")`):

    x: float32 input   ->  cast(x, half), once, where the graph reads it
    W: float32 constant ->  half(W), converted once at compile time (round to nearest even)
    cast(v, float32)   ->  cast(v, half)         (and any other dtype=float32 attribute)
    v: float32 read    ->  cast(v, half)         (a value some operator makes float32 whatever its inputs)
    y: float32 output  ->  cast(y', float32), named y

Every other node is emitted again on the converted values, its types inferred, so that float
activations become half ones and every kernel loads and stores 16 bits an element. Inside a kernel
the loop IR computes a half value in float32 (ember.tir.dtype.compute_dtype), and the operators
accumulate in float32 (matmul, convolution, reductions, normalizations, softmax: ember.ops.reduction's
`acc`), so only what a kernel stores is rounded. A product of half operands (matmul, gemm) takes
the GPU's Tensor Cores at any shape (ember.schedules.gpu.matmul). Inputs and outputs keep the
user's dtype: a float32 input is converted where it is read (the cast fuses into the kernel that
reads it), an output back to float32 in the kernel that makes it; a model given half inputs
(`model.half()`) takes and returns them as they are. Float64 and integer values are left as they
are. Control-flow nodes are copied as they are (their regions' signatures are fixed), and so are
the recurrent cells (FLOAT32_ONLY: they take float32 or float64), on float32 inputs.
"""

from __future__ import annotations

from ..graph.core import Graph, Value
from ..tir import dtype as dt
from .rewrite import Rewriter

WIDE = "float32"
FLOAT32_ONLY = ("lstm", "gru", "rnn")  # operators that take float32 (or float64) only: copied on float32 inputs


def fp16_activations(graph: Graph) -> Graph:
    return half_precision(graph, "float16")


def bf16_activations(graph: Graph) -> Graph:
    return half_precision(graph, "bfloat16")


def half_precision(graph: Graph, half: str) -> Graph:
    rw = Rewriter(graph)
    outputs = {v.name for v in graph.outputs}
    converted: dict[str, Value] = {}  # an old value's name -> the new value nodes read (half where it was float32)

    def narrow(old: Value) -> Value:
        got = converted.get(old.name)
        if got is not None:
            return got
        if graph.is_constant(old):  # (converted from the old graph's data: the float32 copy is never made)
            data = graph.constants[old.name]
            got = rw.constant(data.astype(dt.to_numpy(half)), f"{old.name}.{half}") if data.dtype == WIDE else \
                rw.value(old)
        else:
            v = rw.value(old)
            got = v if v.type.dtype != WIDE else rw.emit("cast", [v], {"dtype": half}, hint=f"{old.name}.{half}")[0]
        converted[old.name] = got
        return got

    def widen(old: Value) -> Value:
        v = rw.value(old)
        return v if v.type == old.type else rw.emit("cast", [v], {"dtype": old.type.dtype}, hint=f"{old.name}.wide")[0]

    for node in graph.nodes:
        if node.regions or node.op in FLOAT32_ONLY:
            rw.copy(node, [widen(old) for old in node.inputs])
            continue
        inputs = [narrow(v) for v in node.inputs]
        attrs = {k: half if k == "dtype" and a == WIDE else a for k, a in node.attrs.items()}
        names = [f"{v.name}.{half}" if v.name in outputs and v.type.dtype == WIDE else v.name for v in node.outputs]
        values = rw.emit(node.op, inputs, attrs, hint=node.name, out_names=names)
        for old, v in zip(node.outputs, values, strict=True):
            if old.name in outputs and v.type.dtype != old.type.dtype:
                v = rw.emit("cast", [v], {"dtype": old.type.dtype}, hint=f"{old.name}.cast", out_names=[old.name])[0]
            rw.alias(old, v)
    return rw.finish()

