"""What an ATen handler sees while the PyTorch importer converts one FX node: the ember graph being
built, the node's own output types (from torch's metadata), and helpers to turn the node's
arguments into ember values (`v`, `operand`), to add nodes (`op`, `ops`) and constants.

An argument of a node arrives at its handler as one of:
- a `Value` of the ember graph (computed at run time from the graph's inputs);
- a `Const`: a torch tensor known at import time (a weight, a buffer, a folded subgraph); it
  becomes a graph constant only when an ember node uses it (`Builder.v`);
- a Python number, bool, string, None or list of them, as in the ATen schema; a symbolic size
  arrives as a dimension string (ember.dims: "past", "past + 1"); `operand` turns one used as a
  value into a `size` node (ember.ops.sizes).

A handler raises `Unsupported` for a variant of an operator that ember cannot take (the importer
lists it with every other problem of the model at once).

A handler never folds constants itself: the importer runs it on a scratch `Builder(folding=True)`
when the node's tensor inputs are all constants, and there each ember operator on constants is
computed at once (ember.frontend.fold), so the handler's result is constants too.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ... import dims
from ...errors import EmberError
from ...graph.core import Dim, Graph, TensorType, Value
from ...ops.nodes import add_op
from ...tir import dtype as dt
from ..fold import fold

E4M3FN_MAX = 448.0  # float8_e4m3fn's largest finite value, where torch's conversions saturate
TORCH_TO_EMBER = {
    torch.bool: "bool", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.float16: "float16", torch.float32: "float32", torch.float64: "float64",
    torch.uint16: "uint16", torch.uint32: "uint32", torch.uint64: "uint64", torch.bfloat16: "bfloat16",
    **{getattr(torch, n): n for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                                      "float8_e8m0fnu")},
}


class FrontendError(EmberError, ValueError):
    """A model the importer cannot represent (a dtype, a size that is no polynomial of symbols,
    an output kind) or a mapping whose result disagrees with what torch says the node computes."""


class Unsupported(EmberError):
    """Raised by a handler: this use of the operator is not supported (the message says why)."""


def _scalar_array(value, dtype: str) -> np.ndarray:
    """A Python number as a 0-d array of an integer dtype wraps, as torch computes `int32 + 2**31`
    (NumPy refuses it); beyond int64, where torch refuses it too, it is Unsupported."""
    if isinstance(value, int) and not isinstance(value, bool) and dt.is_int(dtype):
        if not -2**63 <= value < 2**64:
            raise Unsupported(f"the integer {value} does not fit 64 bits")
        return np.array(value % 2**64, "uint64").astype(dtype)
    return np.array(value, dtype=dtype)


class Const:
    """A tensor known at import time (a parameter, a buffer, a folded subgraph)."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: torch.Tensor, name: str):
        self.tensor, self.name = tensor, name

    def __repr__(self):
        return f"Const({self.name}: {TORCH_TO_EMBER.get(self.tensor.dtype)}{list(self.tensor.shape)})"


def dense(t: torch.Tensor) -> torch.Tensor:
    """A frozen tensor's values as a plain strided tensor: a sparse or mkldnn one densified, a lazily
    negated or conjugated one resolved (NumPy cannot view those as they are)."""
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.resolve_neg().resolve_conj()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor as a NumPy array of its memory (bfloat16 and the float8 types
    through their bits: torch gives NumPy neither)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dt.to_numpy("bfloat16"))
    if t.dtype.itemsize == 1 and t.dtype.is_floating_point:
        return t.view(torch.uint8).numpy().view(dt.to_numpy(TORCH_TO_EMBER[t.dtype]))
    return t.numpy()


def borrowed(t: torch.Tensor) -> np.ndarray:
    """A constant's values as a read-only NumPy view of its tensor's memory, not a copy: a graph
    does not hold a model's weights a second time while it compiles (the compiled model copies
    what it keeps). A view where the graph can keep it as it lies (C order, or a matrix in
    Fortran order: a linear layer's weight transposed), else a copy in C order."""
    t = dense(t.detach()).cpu()
    if not (t.is_contiguous() or t.dim() == 2 and t.t().is_contiguous()):
        t = t.contiguous()
    data = as_numpy(t)
    data.flags.writeable = False  # (a pass that wrote into it would write into the model)
    return data


def ember_dtype(dtype: torch.dtype) -> str:
    try:
        return TORCH_TO_EMBER[dtype]
    except KeyError:
        raise FrontendError(f"dtype {dtype} has no ember equivalent; ember knows "
                            f"{', '.join(TORCH_TO_EMBER.values())}") from None


def torch_dtype(dtype: str) -> torch.dtype:
    return next(t for t, e in TORCH_TO_EMBER.items() if e == dtype)


def value_name(hint: str) -> str:
    """A name the graph printer writes bare: letters, digits, '_' and '.'."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", hint) or "v"


class Builder:
    def __init__(self, graph: Graph, symbols: dict[str, str] | None = None, *, folding: bool = False):
        self.graph = graph
        self.folding = folding  # compute operators on constants now (a scratch builder: see the module's doc)
        self.symbols = dict(symbols or {})  # torch symbol (s0) -> ember symbol name (batch)
        self.node: torch.fx.Node | None = None  # the node being converted
        self._consts: dict[tuple, tuple[Const, Value]] = {}  # (id(Const), cast) -> (the Const, its value)
        self._scalars: dict[tuple, Value] = {}
        self._transposed: dict[int, tuple[Const, Const]] = {}  # id(weight) -> (the weight, its transpose)

    # -- types ------------------------------------------------------------------------------
    def dim(self, d) -> Dim:
        """A size from torch (int or SymInt) as an ember dimension: an int, a symbol name, or a
        polynomial of symbols with integer coefficients (ember.dims: "past + 1", "2*seq")."""
        if not isinstance(d, torch.SymInt):
            return int(d)
        expr = d.node.expr
        if expr.is_Integer:
            return int(expr)
        names = {str(s): self.symbols.setdefault(str(s), str(s)) for s in expr.free_symbols}
        poly = expr.as_poly()
        if poly is None or not all(g.is_Symbol for g in poly.gens) or not all(c.is_Integer for c in poly.coeffs()):
            raise FrontendError(f"size {expr} is not a polynomial of symbols with integer coefficients, which "
                                "ember's symbolic dimensions are (give this dimension a static size)")
        terms = []
        for powers, c in poly.terms():
            factors = [names[str(g)] for g, n in zip(poly.gens, powers) for _ in range(n)]
            terms.append("*".join([str(int(c))] + factors))
        return dims.canonical(" + ".join(terms))

    def tensor_type(self, t: torch.Tensor) -> TensorType:
        return TensorType(tuple(self.dim(d) for d in t.shape), ember_dtype(t.dtype))

    @property
    def out_types(self) -> list[TensorType | None]:
        """The types torch gives the current node's outputs (None for a non-tensor output)."""
        val = self.node.meta["val"]
        vals = val if isinstance(val, list | tuple) else [val]
        return [self.tensor_type(t) if isinstance(t, torch.Tensor) else None for t in vals]

    @property
    def out(self) -> TensorType:
        return self.out_types[0]

    def type_of(self, x: Value | Const) -> TensorType:
        return x.type if isinstance(x, Value) else self.tensor_type(x.tensor)

    # -- values -----------------------------------------------------------------------------
    def v(self, x: Value | Const, dtype: str | None = None) -> Value:
        """x as a value of the graph (a Const becomes a graph constant), cast to dtype if given."""
        if isinstance(x, Const):  # cast now, folded: no cast node for a constant
            key = (id(x), dtype if dtype and dtype != ember_dtype(x.tensor.dtype) else None)
            if key not in self._consts:
                data = borrowed(x.tensor)
                if key[1] is not None:
                    if dtype == "float8_e4m3fn" and data.dtype != bool:  # saturated, as torch converts (cast)
                        data = np.clip(data.astype(np.float32), -E4M3FN_MAX, E4M3FN_MAX)
                    (data,) = fold("cast", [data], {"dtype": dtype}, f"node {self.node.name}")
                self._consts[key] = (x, self.graph.add_constant(data, value_name(x.name)))
            x = self._consts[key][1]
        if not isinstance(x, Value):
            raise Unsupported(f"expected a tensor, got {x!r}")
        return self.cast(x, dtype) if dtype else x

    def transposed(self, weight: Const) -> Value:
        """A constant matrix transposed: a view of it (`borrowed`, in Fortran order), once per
        weight: a layer that a model calls many times (ALBERT's one layer, run 12 times) has one
        constant, not one per call."""
        if id(weight) not in self._transposed:
            self._transposed[id(weight)] = (weight, Const(weight.tensor.t(), weight.name + ".T"))
        return self.v(self._transposed[id(weight)][1])

    def operand(self, x, dtype: str) -> Value:
        """A tensor, Python number or symbolic size (a size used as a value) as a value of the
        given dtype."""
        if isinstance(x, bool | int | float):
            return self.scalar(x, dtype)
        if isinstance(x, str):
            return self.cast(self.size(x), dtype)
        return self.v(x, dtype)

    def size(self, dim: str) -> Value:
        """The value of a symbolic size (ember.dims) as a 0-d int64 tensor: an ember `size` node
        bound to graph inputs that have its symbols as dimensions (ember.ops.sizes)."""
        carriers: list[Value] = []
        bind = []
        for sym in dims.symbols_of(dim):
            found = next(((v, axis) for v in self.graph.inputs for axis, d in enumerate(v.shape) if d == sym), None)
            if found is None:
                raise Unsupported(f"the size {dim!r} is used as a value, but no input has {sym!r} as a dimension")
            if found[0] not in carriers:
                carriers.append(found[0])
            bind.append((sym, carriers.index(found[0]), found[1]))
        return self.op("size", carriers, dim=dim, bind=tuple(bind))

    def cast(self, x: Value, dtype: str) -> Value:
        """x as dtype; to float8_e4m3fn saturated, as torch converts: values past its largest finite
        value, infinities included, become it (ember's cast gives NaN there, as ml_dtypes does)."""
        if x.dtype == dtype:
            return x
        if dtype == "float8_e4m3fn" and x.dtype != "bool":
            wide = x if x.dtype in ("float16", "float32", "float64") else self.cast(x, "float32")
            x = self.op("clip", [wide], min=-E4M3FN_MAX, max=E4M3FN_MAX)
        return self.op("cast", [x], dtype=dtype)

    def scalar(self, value, dtype: str) -> Value:
        """A 0-d constant, one per (value, dtype) in the graph."""
        key = (type(value), value, dtype)
        if key not in self._scalars:
            self._scalars[key] = self.graph.add_constant(_scalar_array(value, dtype), "scalar")
        return self._scalars[key]

    def const(self, data: np.ndarray, hint: str = "const") -> Value:
        return self.graph.add_constant(np.ascontiguousarray(data), value_name(hint))

    def scratch(self) -> Builder:
        """A builder of a graph of its own, converting the same node, whose operators on constants
        fold: the importer runs a handler on it to compute a node of constants."""
        scratch = Builder(Graph(name=self.graph.name), self.symbols, folding=True)
        scratch.node = self.node
        return scratch

    # -- nodes ------------------------------------------------------------------------------
    def ops(self, op: str, inputs, **attrs) -> list[Value]:
        """Append an ember node (types inferred); returns its outputs. The nodes made for one FX
        node are named after it: relu, then relu.1, relu.2, ... (FX names have no dots). On a
        folding builder, an operator whose inputs are all constants gives constants instead."""
        base = value_name(self.node.name)
        hint, k = base, 0
        while self._taken(hint):
            k += 1
            hint = f"{base}.{k}"
        inputs = list(inputs)
        if self.folding and all(isinstance(v, Value) and self.graph.is_constant(v) for v in inputs):
            outs = fold(op, [self.graph.constants[v.name] for v in inputs], attrs, f"node {self.node.name}")
            if outs is not None:
                return [self.graph.add_constant(o, hint) for o in outs]
        return add_op(self.graph, op, inputs, attrs, out_names=[hint])

    def _taken(self, name: str) -> bool:
        try:
            self.graph.value(name)
        except KeyError:
            return False
        return True

    def op(self, op: str, inputs, **attrs) -> Value:
        (out,) = self.ops(op, inputs, **attrs)
        return out
