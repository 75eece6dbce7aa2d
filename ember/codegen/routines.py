"""The routines a `CallRoutine` names (ember.tir.routines: their calling conventions), once per
code generator: `c_routine` writes a routine's C function into a unit's prelude and gives its
name; `PYTHON_ROUTINES` are their NumPy twins, which the loop-IR interpreter calls with flat
arrays and offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import LowerError
from ..tir.nbits import PANEL, dequantize
from ..tir.routines import ATTENTION, GEMM_NBITS
from ..tir.stmt import CallRoutine
from ..tir.tensor_intrin import get_intrin
from .c_attention import attention as c_attention
from .c_gemm_nbits import gemm_nbits as c_gemm_nbits

if TYPE_CHECKING:
    from .c_prelude import CPrelude


def c_routine(lib: CPrelude, routine: str, params: dict) -> str:
    """The C function of `routine` with static `params`, added to the prelude `lib` (a tensor
    intrinsic's: its declaration's C source, once per unit)."""
    if "intrin" in params:
        lib.source(f"tensor_intrin {params['intrin']}", get_intrin(params["intrin"]).c_source)
        return routine
    if routine == ATTENTION:
        return c_attention(lib, params["mask"], params["causal"], params["lanes"])
    if routine == GEMM_NBITS:
        return c_gemm_nbits(lib, params["bits"], params["group"], params["offsets"], params["bias"], params["lanes"])
    raise LowerError(f"no C code for the routine {routine!r}")


def tensor_intrin_args(call: CallRoutine) -> tuple:
    """The C arguments of a tensorized call (ember.tir.schedule.tensorize): the pointers read and
    written and the scalars its intrinsic's role passes, out of all the addresses and strides the
    call carries for the interpreter."""
    params = dict(call.params)
    ptrs = call.reads + call.writes
    return (tuple(ptrs[i] for i in params["c_reads"]), tuple(ptrs[i] for i in params["c_writes"]),
            call.scalars[:params["c_scalars"]])


def _attention(params: dict, reads, writes, scalars) -> None:
    """The attention routine on flat arrays: reads (q, k, v[, mask]) and writes (out,) are
    (array, offset) pairs; softmax in float64, rounded to float32 once."""
    q0, nq, s, e, ev, q_rs, k_rs, v_rs, o_rs, m_rs, m_cs = (int(x) for x in scalars[:11])
    scale = scalars[11]
    (q, q_off), (k, k_off), (v, v_off) = reads[:3]
    (out, o_off), = writes
    rows = np.arange(q0, q0 + nq)[:, None]
    keys = np.arange(s)[None, :]
    qb = q[q_off + rows * q_rs + np.arange(e)[None, :]].astype(np.float64) * np.float32(scale)
    kb = k[k_off + keys.T * k_rs + np.arange(e)[None, :]].astype(np.float64)
    vb = v[v_off + keys.T * v_rs + np.arange(ev)[None, :]].astype(np.float64)
    scores = qb @ kb.T
    keep = np.ones(scores.shape, bool)
    if params["causal"]:
        keep &= keys <= rows
    if params["mask"] != "none":
        mask, m_off = reads[3]
        m = mask[m_off + rows * m_rs + keys * m_cs]
        if params["mask"] == "bool":
            keep &= m.astype(bool)
        else:
            scores = scores + m
    scores = np.where(keep, scores, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        top = scores.max(axis=1, keepdims=True)
        w = np.exp(scores - np.where(np.isneginf(top), 0, top))
        total = w.sum(axis=1, keepdims=True)
        result = np.where(total == 0, 0, (w @ vb) / total)  # every key masked out: 0
    out[o_off + rows * o_rs + np.arange(ev)[None, :]] = result.astype(out.dtype)


def _gemm_nbits(params: dict, reads, writes, scalars) -> None:
    """The gemm_nbits routine on flat arrays: the panel dequantized (ember.tir.nbits.dequantize),
    x w in float64, rounded to float32 once."""
    m, k, ncols, x_rs, o_rs, s_rs = (int(v) for v in scalars)
    bits = params["bits"]
    (x, x_off), (codes, c_off), *rest = reads
    width = PANEL if bits == 8 else PANEL // 2
    group = params["group"]
    cols = np.arange(PANEL)[None, :]

    def per_group(arr, off):
        block = arr[off + np.arange(k // group if group else 1)[:, None] * s_rs + cols]
        return block if group else block[0]

    scales = per_group(*rest[0])
    offsets = per_group(*rest[1]) if params["offsets"] else None
    w = dequantize(codes[c_off:c_off + k * width].reshape(1, k, width), scales, offsets, bits).astype(np.float64)
    rows = x[x_off + np.arange(m)[:, None] * x_rs + np.arange(k)[None, :]].astype(np.float64)
    y = rows @ w
    if params["bias"]:
        bias, b_off = rest[-1]
        y = y + bias[b_off:b_off + PANEL]
    (out, o_off), = writes
    out[o_off + np.arange(m)[:, None] * o_rs + np.arange(ncols)[None, :]] = y[:, :ncols].astype(out.dtype)


PYTHON_ROUTINES = {ATTENTION: _attention, GEMM_NBITS: _gemm_nbits}
