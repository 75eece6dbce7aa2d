"""Weight-only quantization: a gemm of float32 rows by a constant float32 weight (a linear layer
after flatten_products; a language model's LM head, its weight the token embedding transposed)
becomes a gemm_nbits over the weight's int8 or int4 codes (ember.ops.gemm_nbits), so that a
decode step reads a quarter or an eighth of the weight bytes:

    gemm(x[M, K], w[K, N], c[N]) -> gemm_nbits(x, codes, scales[, offsets], c_padded)

int8: per output channel, symmetric: scale = max |w[:, n]| / 127, q = round(w / scale).
int4: per group of G rows and channel; symmetric as llama.cpp's Q4_0: scale = -m / 8 for m the
group's weight of the largest magnitude (which becomes code -8: all 16 codes used), codes q + 8
in 0..15, w = scale (q - 8); with zero points (GPTQ/AWQ's asymmetric form):
scale = (max - min) / 15, zero = round(-min / scale), w = scale (q - zero).

Weights quantized already (a GGUF file's, ember.frontend.gguf) reach the graph as their exact
float32 dequantization; given as `known` (by the digest of that float32 weight), they take
their own codes, bit for bit, whatever their format (ember.compile(..., weights=<the mapping>)),
also where fuse_siblings concatenated them (LLaMA's q, k and v): pieces of whole panels, joined.

A weight to quantize that holds a NaN or an infinity is a CompileError naming it and where: its
codes would lose them (int8's scale became 1 and the NaN a code, the column's outputs finite where
float32 gives NaN).
Weights the gemm_nbits layout cannot take stay float32: K not a multiple of the group (int4: a
RuntimeWarning names them), a non-constant weight, alpha or beta other than 1, or a bias that is
not one value per column.
The activations and the embedding's gather stay float32 (the gather reads one row per token).
Run it before pad_gemv and pack_weights, which then find no float32 weight to pad or pack.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import CompileError, ConfigError
from ..graph.core import Graph, Node, Value
from ..tir.nbits import GROUPS, PANEL, QuantizedWeight, digest, pack_int4, pack_int8, pad_columns
from .rewrite import Rewriter, rebuild

WEIGHTS = ("int8", "int4")


@dataclass(frozen=True)
class WeightFormat:
    """How weights are quantized: bits 8 or 4; int4's group size and whether it has zero points."""

    bits: int  # 0: only the weights `known` holds are quantized
    group: int = 128
    zero_points: bool = False
    known: Mapping[str, QuantizedWeight] | None = None  # by digest of the float32 weight

    @classmethod
    def of(cls, weights: str | Mapping[str, QuantizedWeight] | None, group_size: int | None = None,
           zero_points: bool = False) -> WeightFormat | None:
        """The format the options of ember.compile name (None: weights stay float32); a mapping
        is weights quantized already (ember.frontend.gguf's), found by their float32 form.
        group_size (default 128) and zero_points are int4's: given with other weights, which
        would drop them, they are a ConfigError."""
        if isinstance(weights, Mapping):
            odd = next((v for v in weights.values() if not isinstance(v, QuantizedWeight)), None)
            if odd is not None:
                raise ConfigError(f"weights given as a mapping hold QuantizedWeights by digest (load_gguf's "
                                  f"`weights`), got a value of type {type(odd).__name__}")
        elif weights not in (*WEIGHTS, None, "float32"):
            raise ConfigError(f"weights must be one of {WEIGHTS} or None, got {weights!r}")
        if not isinstance(zero_points, bool | np.bool_):
            raise ConfigError(f"zero_points must be True or False, got {zero_points!r}")
        given = [o for o, v in (("group_size", group_size is not None), ("zero_points", zero_points)) if v]
        if weights != "int4" and given:
            raise ConfigError(f"{' and '.join(given)} {'is' if given == ['group_size'] else 'are'} for int4 weights "
                              f"(weights='int4'); {_no_groups(weights)}")
        if isinstance(weights, Mapping):
            return cls(0, known=weights)
        if weights is None or weights == "float32":
            return None
        group_size = 128 if group_size is None else group_size
        if weights == "int4" and (isinstance(group_size, bool) or not isinstance(group_size, int | np.integer)
                                  or group_size not in GROUPS):
            raise ConfigError(f"group_size must be one of {GROUPS} for int4 weights, got {group_size!r}")
        return cls(8 if weights == "int8" else 4, int(group_size), bool(zero_points))


def _no_groups(weights) -> str:
    """Why weights other than int4 take no group_size or zero_points (the end of the ConfigError)."""
    if isinstance(weights, Mapping):
        return "weights given quantized (a mapping) keep their own codes' format"
    if weights == "int8":
        return "int8 weights are symmetric per output channel"
    return f"weights={weights!r} leaves the weights float32"


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K, N) float weight -> (codes in panels, scales (N',)), symmetric per column."""
    top = np.abs(w).max(axis=0)
    scale = np.where(top > 0, top / 127, 1).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return pack_int8(q), pad_columns(scale)


def quantize_int4(w: np.ndarray, group: int, zero_points: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(K, N) float weight -> (codes in panels, scales (K / G, N'), offsets (K / G, N') or None)."""
    k, n = w.shape
    g = w.reshape(k // group, group, n)
    if zero_points:
        lo, hi = np.minimum(g.min(axis=1), 0), np.maximum(g.max(axis=1), 0)
        scale = np.where(hi > lo, (hi - lo) / 15, 1).astype(np.float32)
        zero = np.clip(np.rint(-lo / scale), 0, 15)
        q = np.clip(np.rint(g / scale[:, None]) + zero[:, None], 0, 15)
        offsets = pad_columns((-scale * zero).astype(np.float32))
    else:
        at = np.abs(g).argmax(axis=1)[:, None]  # llama.cpp's Q4_0: the largest magnitude, signed, is code -8
        top = np.take_along_axis(g, at, axis=1)[:, 0]
        scale = np.where(top != 0, top / -8, 1).astype(np.float32)
        q = np.clip(np.rint(g / scale[:, None]), -8, 7) + 8
        offsets = None
    return pack_int4(q.reshape(k, n).astype(np.uint8)), pad_columns(scale), offsets


def quantize_weights(graph: Graph, fmt: WeightFormat | None = None) -> Graph:
    """The graph with its gemms' constant float32 weights quantized to `fmt` (None: unchanged)."""
    if fmt is None:
        return graph
    done: dict[tuple[str, bool], tuple] = {}  # a weight two gemms share (a tied head) once
    out = rebuild(graph, lambda rw, node, ins: _rewrite(rw, node, ins, fmt, done))
    kept = [name for (name, _), (q, _) in done.items() if q is None]
    if fmt.bits == 4 and kept:  # (as llama.cpp's quantizer says which tensors fall back)
        warnings.warn(f"weights='int4', group_size={fmt.group}: {len(kept)} weight(s) keep float32, their K not a "
                      f"multiple of {fmt.group} ({', '.join(kept[:3])}{', ...' if len(kept) > 3 else ''}); a "
                      "group_size that divides K quantizes them", RuntimeWarning, stacklevel=2)
    return out


def _rewrite(rw: Rewriter, node: Node, ins: list[Value], fmt: WeightFormat, done: dict):
    if node.op != "gemm" or node.attrs["trans_a"] or node.attrs["b_panels"] or node.attrs["alpha"] != 1:
        return None
    x, wv = ins[0], ins[1]
    w = rw.constant_data(wv)
    if w is None or w.dtype != np.float32 or x.dtype != "float32" or w.ndim != 2:
        return None
    trans = bool(node.attrs["trans_b"])
    k, n = w.shape[::-1] if trans else w.shape
    bias = None
    if len(ins) == 3:
        c = rw.constant_data(ins[2])
        if c is None or node.attrs["beta"] != 1 or c.dtype != np.float32 or c.size not in (1, n) \
                or (c.size == n and c.shape[-1] != n):
            return None
        bias = pad_columns(np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32))
    key = (wv.name, trans)
    if key not in done:
        q = _quantized(w.T if trans else w, fmt, wv.name)
        parts = [] if q is None else [q.codes, q.scales] + ([q.offsets] if q.offsets is not None else [])
        names = ("codes", "scales", "offsets")
        done[key] = q, [rw.constant(p, f"{wv.name}_{name}") for p, name in zip(parts, names)]
    q, values = done[key]
    if q is None:
        return None
    inputs = values + ([rw.constant(bias, f"{ins[2].name}_padded")] if bias is not None else [])
    attrs = {"bits": q.bits, "group": q.group, "n": n, "offsets": q.offsets is not None, "act": "auto"}
    return rw.emit("gemm_nbits", [x] + inputs, attrs, hint=node.name, out_names=[node.outputs[0].name])


def _joined(dense: np.ndarray, known: Mapping[str, QuantizedWeight]) -> QuantizedWeight | None:
    """The codes of a weight that fuse_siblings concatenated from known ones (LLaMA's q, k and v,
    gate and up), pieces of whole panels of one format joined panel by panel; else None."""
    k = dense.shape[0]
    widths = sorted({q.codes.shape[0] * PANEL for q in known.values() if q.codes.shape[1] == k}, reverse=True)
    pieces, at = [], 0
    while at < dense.shape[1]:
        found = (known.get(digest(dense[:, at:at + w])) for w in widths if at + w <= dense.shape[1])
        piece = next((q for q in found if q is not None), None)
        if piece is None:
            return None
        pieces.append(piece)
        at += piece.codes.shape[0] * PANEL
    first = pieces[0]
    if len(pieces) < 2 or any((p.bits, p.group, p.offsets is None) != (first.bits, first.group, first.offsets is None)
                              for p in pieces):
        return None
    join = lambda arrays, axis: np.ascontiguousarray(np.concatenate(arrays, axis=axis))  # noqa: E731
    return QuantizedWeight(first.bits, first.group, join([p.codes for p in pieces], 0),
                           join([p.scales for p in pieces], -1),
                           None if first.offsets is None else join([p.offsets for p in pieces], -1))


def _quantized(dense: np.ndarray, fmt: WeightFormat, name: str) -> QuantizedWeight | None:
    """The quantized form of the (K, N) weight `name`: the one `fmt.known` holds for it, else
    quantized to fmt's bits (None: it stays float32)."""
    if fmt.known:
        q = fmt.known.get(digest(dense)) or _joined(dense, fmt.known)
        if q is not None:
            return q
    if not (fmt.bits == 8 or fmt.bits == 4 and dense.shape[0] % fmt.group == 0):
        return None
    if not np.isfinite(dense).all():
        k, n = np.argwhere(~np.isfinite(dense))[0]
        raise CompileError(f"weights='int{fmt.bits}': weight {name} holds {dense[k, n]} (row {k}, column {n} of its "
                           f"(K, N) = {dense.shape}), which its codes cannot hold; compile it with weights=None")
    if fmt.bits == 8:
        return QuantizedWeight(8, 0, *quantize_int8(dense))
    return QuantizedWeight(4, fmt.group, *quantize_int4(dense, fmt.group, fmt.zero_points))
