"""A product of an activation and a constant weight matrix becomes a 2-D gemm: the leading axes of
the left operand fold into its rows, around the product, and a bias its only reader adds becomes
the gemm's own:

    matmul(a, W)         ->  reshape(gemm(reshape(a, (R, K)), W), (B..., M, N))
    add(matmul(a, W), c) ->  reshape(gemm(reshape(a, (R, K)), W, c'), (B..., M, N))

with a of shape (B..., M, K) (any leading axes, static or symbolic: R = B*...*M, a product of
symbols when they are: "batch*seq"), W a constant (K, N) and c a constant bias per column ((N,),
(1, ..., N) or one value; c' is it as (N,) or (1,)). A 2-D a needs no reshape: the matmul is the
gemm. ONNX exports write every linear layer so (MatMul of a (batch, seq, K) activation, then Add
of the bias): the weight passes that follow, pad_gemv and pack_weights, take 2-D gemms only, and
a batched matmul would keep its weights row-major and its bias as a separate add.

The reshapes cost nothing where the sizes let them: the one of a is a view (or fused into a's
producer); the one of the result, when it only puts ones in front of (R, N) (a batch of one
sequence) or splits R in two (batch, seq), is part of the gemm's epilogue with what follows it
(ember.passes.fuse), else a view and the epilogue a kernel of its own. Products that read the
same a share one reshape of it (fuse_siblings runs before, and QKV projections already are one
product then).

Left alone: a right operand that is not a constant, not 2-D (batched weights) or not floating
point; a left operand of rank 1; a product whose dtypes differ. A bias add is folded only when it
reads nothing but the product and a constant of the product's dtype, keeps the product's type
and is the product's only reader (the product no graph output; the add's keeps its name);
otherwise it stays an add after the gemm.
"""

from __future__ import annotations

from .. import dims
from ..graph.core import Graph, Node, Value
from ..tir import dtype as dt
from .rewrite import Rewriter


def flatten_products(graph: Graph) -> Graph:
    products = [n for n in graph.nodes if _flattens(graph, n)]
    if not products:
        return graph
    users, outputs = graph.users(), set(graph.outputs)
    biases = {n: bias_add(graph, n, users, outputs) for n in products}
    folded = {add for add in biases.values() if add is not None}
    flats: dict[Value, Value] = {}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in biases:
            add = biases[node]
            c = None if add is None else _bias(rw, next(v for v in add.inputs if v is not node.outputs[0]))
            end = node if add is None else add
            (y,) = flat_product(rw, rw.value(node.inputs[0]), rw.value(node.inputs[1]), c, hint=node.name,
                                out_name=end.outputs[0].name, flats=flats)
            rw.alias(end.outputs[0], y)
        elif node not in folded:
            rw.copy(node, rw.inputs(node))
    return rw.finish()


def flat_product(rw: Rewriter, a: Value, b: Value, c: Value | None = None, *, hint: str, out_name: str | None = None,
                 flats: dict[Value, Value] | None = None) -> list[Value]:
    """a (B..., M, K) @ b (K, N) [+ c], values of the new graph, as gemm(reshape(a, (R, K)), b, c')
    reshaped to (B..., M, N) (no reshapes when a is 2-D; c as gemm takes it); the result's
    value named `out_name`. `flats` keeps the reshape of each a, shared by the products reading it."""
    shape = a.type.shape
    flat = a
    if len(shape) > 2:
        flats = {} if flats is None else flats
        if a not in flats:
            (flats[a],) = rw.emit("reshape", [a], {"shape": (dims.mul(*shape[:-1]), shape[-1])}, hint=f"{hint}_rows")
        flat = flats[a]
    names = [out_name] if out_name is not None and len(shape) == 2 else []
    y = rw.emit("gemm", [flat, b] + ([c] if c is not None else []), hint=hint if len(shape) == 2 else f"{hint}_2d",
                out_names=names)
    if len(shape) == 2:
        return y
    return rw.emit("reshape", y, {"shape": (*shape[:-1], b.type.shape[-1])}, hint=hint,
                   out_names=[out_name] if out_name is not None else [])


def _flattens(graph: Graph, node: Node) -> bool:
    """Whether the node is a matmul of a left operand of rank >= 2 and a constant float weight matrix."""
    if node.op != "matmul":
        return False
    a, b = node.inputs
    return (graph.is_constant(b) and b.type.rank == 2 and a.type.rank >= 2 and a.type.dtype == b.type.dtype
            and dt.is_float(b.type.dtype))


def _bias(rw: Rewriter, c: Value) -> Value:
    """The bias (new graph) as gemm's c: 1-D, (N,) or (1,)."""
    if c.type.rank == 1:
        return rw.value(c)
    data = rw.old.constants[c.name]
    return rw.constant(data.reshape(data.shape[-1:] or (1,)), f"{c.name}.columns")


def bias_add(graph: Graph, product: Node, users: dict[Value, list[Node]], outputs: set[Value]) -> Node | None:
    """The add of a constant bias per column ((N,), (1, ..., N) or one value) that is the product's only
    reader (module doc), or None; fuse_siblings takes its siblings' biases by it too."""
    (y,) = product.outputs
    readers = users.get(y, [])
    if len(readers) != 1 or readers[0].op != "add" or y in outputs:
        return None
    add = readers[0]
    c = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
    if c is y or not graph.is_constant(c) or c.type.dtype != y.type.dtype or add.outputs[0].type != y.type:
        return None
    shape = c.type.shape
    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, y.type.shape[-1])):
        return None
    return add
