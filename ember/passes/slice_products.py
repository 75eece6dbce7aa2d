"""Rows sliced out of a matrix product are sliced out of its left operand instead, before it:

    slice(matmul(a, w), rows)  ->  matmul(slice(a, rows), w)      (gemm alike, its bias per column)

A language model's head computes the logits of every position and keeps the last one
(`logits[:, -1]`): GPT-2's 768 x 50257 head over a 128-token prompt is 9.9 GFLOP, two thirds
of the prefill, for one row of 50257 values. Sliced first, the product is a GEMV over that row
(a matmul whose left operand is then (B..., M, K) becomes a 2-D gemm between reshapes, the form
the weight passes, pad_gemv and pack_weights, take: ember.passes.flatten_products.flat_product).

The slice must be the product's only reader (else the whole product is computed anyway) and may
cut only rows and batch axes of the result that come from the left operand: the row axis (-2),
and leading axes where the right operand has no batch axes of its own (a weight matrix) and the
left operand's size is the result's. Columns stay as they are (a slice of them would pack a
slice of the weights). A reshape that only puts ones in front of a 2-D product's (M, N) (a linear
layer over a batch of one sequence) may stand between the two; then the rows are sliced.
A gather of one constant index is the slice of that position with its axis dropped (how
torch.onnx exports `logits[:, -1]`), and an ONNX MatMulNBits' gemm_nbits a product whose rows
are its x's (its weights already packed by the import):

    gather(reshape(gemm_nbits(x, ...)), -1, axis=1)  ->  reshape(gemm_nbits(slice(x, [-1:]), ...))
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.common import normalize_axis
from .flatten_products import flat_product
from .rewrite import Rewriter, rebuild

PRODUCTS = ("matmul", "gemm", "gemm_nbits")  # (gemm_nbits: an ONNX MatMulNBits, its rows x's)


def slice_products(graph: Graph) -> Graph:
    if not any(n.op in ("slice", "gather") and n.inputs[0].node is not None
               and n.inputs[0].node.op in (*PRODUCTS, "reshape") for n in graph.nodes):
        return graph  # nothing to do: the graph itself (a rebuild would drop unused constants)
    users, outputs = graph.users(), set(graph.outputs)

    def only_reader(v: Value) -> bool:
        return len(users.get(v, ())) == 1 and v not in outputs

    def rewrite(rw: Rewriter, node: Node, ins: list[Value]):
        cut = _as_slice(graph, node)
        if cut is None or not only_reader(node.inputs[0]):
            return None
        product, lifted = node.inputs[0].node, None
        if product is not None and product.op == "reshape" and _adds_leading_ones(product) \
                and only_reader(product.inputs[0]):  # a 2-D product seen as (1, ..., M, N)
            lifted, product = product, product.inputs[0].node
        if product is None or product.op not in PRODUCTS or product.attrs.get("act") == "int8":
            return None
        axes = _left_axes(cut, product, lifted)
        if axes is None:
            return None
        a, *rest = rw.inputs(product)
        (sliced,) = rw.emit("slice", [a], dict(cut, axes=axes), hint=f"{node.name}_rows")
        op, attrs, out = product.op, product.attrs, node.outputs[0]
        named = [out.name] if node.op == "slice" and lifted is None else []  # (a gather's axis is reshaped away)
        if op == "matmul" and sliced.type.rank > 2:  # (B..., M, K) @ W: the 2-D gemm the weight passes take
            (y,) = flat_product(rw, sliced, *rest, hint=product.name, out_name=named[0] if named else None)
        else:
            (y,) = rw.emit(op, [sliced, *rest], attrs, hint=product.name, out_names=named)
        if named:
            return [y]
        return rw.emit("reshape", [y], {"shape": out.shape}, hint=(lifted or node).name, out_names=[out.name])

    return rebuild(graph, rewrite)


def _adds_leading_ones(reshape: Node) -> bool:
    """Whether a reshape only puts dimensions of size 1 in front of its input's (M, N)."""
    x, y = reshape.inputs[0].shape, reshape.outputs[0].shape
    return len(x) == 2 and len(y) > 2 and tuple(y[-2:]) == tuple(x) and all(d == 1 for d in y[:-2])


def _as_slice(graph: Graph, node: Node) -> dict | None:
    """The slice's attributes (of one input), or those of the slice of one position that a gather
    of a constant scalar index is with its axis then dropped (the exporter's logits[:, -1]); else None."""
    if node.op == "slice" and len(node.inputs) == 1:
        return dict(node.attrs)
    if node.op != "gather" or node.inputs[1].node is not None:
        return None
    index = graph.constants.get(node.inputs[1].name)
    if index is None or index.shape != () or index.dtype.kind not in "iu":
        return None
    i, axis = int(index), node.attrs["axis"]
    n = node.inputs[0].type.shape[axis]
    if not (-n <= i < n if isinstance(n, int) else i in (0, -1)):
        return None  # (an index out of range is the gather's error to raise)
    return {"starts": (i,), "ends": (i + 1 if i != -1 else np.iinfo(np.int64).max,), "axes": (axis,),
            "steps": None}


def _left_axes(cut: dict, product: Node, lifted: Node | None = None) -> tuple[int, ...] | None:
    """The axes of the product's left operand that the slice's axes (`cut`, its attributes) of
    the result are (of the reshape `lifted` of it, when given: its rows only), or None when a
    sliced axis is not one of its rows or batch axes (see the module doc)."""
    a, b = product.inputs[0].type, product.inputs[1].type
    out = product.outputs[0].type
    if a.rank < 2 or (b.rank != 2 and product.op != "gemm_nbits") or product.attrs.get("trans_a") or (
            product.op == "gemm" and len(product.inputs) == 3 and _per_row(product.inputs[2].type)):
        return None
    axes = cut["axes"] if cut["axes"] is not None else tuple(range(len(cut["starts"])))
    seen = lifted.outputs[0].type if lifted is not None else out
    axes = [normalize_axis("slice", axis, seen.rank) for axis in axes]
    if lifted is not None:  # (1, ..., M, N) of the (M, N) product: its rows only
        if any(axis != seen.rank - 2 for axis in axes):
            return None
        axes = [out.rank - 2] * len(axes)
    mapped = []
    for axis in axes:
        if axis == out.rank - 1:
            return None  # columns
        left = axis - (out.rank - a.rank)
        if left < 0 or a.shape[left] != out.shape[axis]:
            return None
        mapped.append(left)
    return tuple(mapped)


def _per_row(c) -> bool:
    """Whether a gemm's bias varies along the rows (a 2-D bias with more than one row)."""
    return c.rank >= 2 and c.shape[-2] != 1
