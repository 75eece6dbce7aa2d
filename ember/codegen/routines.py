"""The routines a `CallRoutine` names (ember.tir.routines: their calling conventions), once per
code generator: `c_routine` writes a routine's C function into a unit's prelude and gives its
name; `PYTHON_ROUTINES` are their NumPy twins, which the loop-IR interpreter calls with flat
arrays and offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import LowerError
from ..tir import winograd
from ..tir.kv_int8 import SCALE_BYTES, dequantize_rows
from ..tir.nbits import (
    PANEL,
    activate,
    dequantize,
    dequantize_groups,
    int8_products,
    quantize_groups,
    quantize_rows,
    unpack_vnni,
    vnni_rows,
)
from ..tir.routines import (
    ATTENTION,
    ATTENTION_DECODE,
    GEMM_NBITS,
    GEMM_NBITS_STREAM,
    QUANTIZE_GROUPS,
    QUANTIZE_ROWS,
    WINOGRAD_INPUT,
    WINOGRAD_PRODUCT,
)
from ..tir.stmt import CallRoutine
from ..tir.tensor_intrin import get_intrin
from .c_attention import attention as c_attention
from .c_attention_decode import attention_decode as c_attention_decode
from .c_gemm_nbits import gemm_nbits as c_gemm_nbits
from .c_gemm_nbits_vnni import gemm_nbits_int8 as c_gemm_nbits_int8
from .c_gemm_nbits_vnni import gemm_nbits_rows as c_gemm_nbits_rows
from .c_gemm_nbits_vnni import quantize_rows as c_quantize_rows
from .c_gemv_nbits_vnni import gemv_vnni as c_gemv_vnni
from .c_gemv_nbits_vnni import quantize_groups as c_quantize_groups
from .c_winograd import winograd_input, winograd_product

if TYPE_CHECKING:
    from .c_prelude import CPrelude


def c_routine(lib: CPrelude, routine: str, params: dict) -> str:
    """The C function of `routine` with static `params`, added to the prelude `lib` (a tensor
    intrinsic's: its declaration's C source, once per unit)."""
    if "intrin" in params:
        lib.source(f"tensor_intrin {params['intrin']}", get_intrin(params["intrin"]).c_source)
        return routine
    if routine == ATTENTION:
        return c_attention(lib, params["mask"], params["causal"], params["lanes"], params.get("appended", False))
    if routine == ATTENTION_DECODE:
        return c_attention_decode(lib, params["mask"], params["kv"], params["lanes"], params["dims"],
                                  params.get("appended", False))
    if routine == GEMM_NBITS and params.get("act") == "int8_groups":
        return c_gemv_vnni(lib, params["bits"], params["group"], params["xgroup"], params["offsets"], params["bias"],
                           params.get("activation"))
    if routine == GEMM_NBITS:
        if params.get("act") == "int8":
            return c_gemm_nbits_int8(lib, params["bits"], params["group"], params["offsets"], params["bias"],
                                     params["lanes"])
        if params.get("act") == "int8_rows":
            return c_gemm_nbits_rows(lib, params["bits"], params["group"], params["offsets"], params["bias"],
                                     params["residual"], params["k"], params["glu"], params["activation"])
        return c_gemm_nbits(lib, params["bits"], params["group"], params["offsets"], params["bias"], params["lanes"])
    if routine == QUANTIZE_ROWS:
        return c_quantize_rows(lib)
    if routine == QUANTIZE_GROUPS:
        return c_quantize_groups(lib, params["group"])
    if routine == WINOGRAD_INPUT:
        return winograd_input(lib, params["m"], params["ib"], params["r"])
    if routine == WINOGRAD_PRODUCT:
        return winograd_product(lib, params["m"], params["c"], params["ob"], params["r"], params["rg"], params["nb"],
                                params["bias"], params["residual"], params["relu"])
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
    old = np.arange(s - 1 if params.get("appended") else s)[:, None]
    kb = k[k_off + old * k_rs + np.arange(e)[None, :]].astype(np.float64)
    vb = v[v_off + old * v_rs + np.arange(ev)[None, :]].astype(np.float64)
    if params.get("appended"):  # the last key and value: the step's own, after the cache's
        (kn, kn_off), (vn, vn_off) = reads[-2:]
        kb = np.concatenate([kb, kn[kn_off:kn_off + e][None].astype(np.float64)])
        vb = np.concatenate([vb, vn[vn_off:vn_off + ev][None].astype(np.float64)])
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


def _attention_decode(params: dict, reads, writes, scalars) -> None:
    """The decode attention routine on flat arrays: each key/value head's G query heads' one
    query as the attention routine computes a row (float64 softmax, rounded to float32 once); an
    int8 cache's rows dequantized (ember.tir.kv_int8)."""
    h_count, g_count, s, e, ev, q_hs, k_hs, k_rs, v_hs, v_rs, o_hs, m_hs, m_cs, kn_hs, vn_hs = \
        (int(x) for x in scalars[:15])
    (q, q_off), (k, k_off), (v, v_off) = reads[:3]
    (out, o_off), = writes
    cached = np.arange(s - 1 if params.get("appended") else s)[:, None]
    row = SCALE_BYTES if params["kv"] == "int8" else 0  # an int8 row's scale, after its codes
    for h in range(h_count):
        kb, vb = ((dequantize_rows if row else np.asarray)(x[off + cached * rs + np.arange(n + row)[None, :]]).astype(
            np.float64) for x, off, rs, n in ((k, k_off + h * k_hs, k_rs, e), (v, v_off + h * v_hs, v_rs, ev)))
        if params.get("appended"):
            (kn, kn_off), (vn, vn_off) = reads[-2:]
            kb = np.concatenate([kb, kn[kn_off + h * kn_hs:][:e][None].astype(np.float64)])
            vb = np.concatenate([vb, vn[vn_off + h * vn_hs:][:ev][None].astype(np.float64)])
        heads = h * g_count + np.arange(g_count)[:, None]  # the query heads of key/value head h
        scores = q[q_off + heads * q_hs + np.arange(e)[None, :]].astype(np.float64) * np.float32(scalars[15]) @ kb.T
        if params["mask"] != "none":
            mask, m_off = reads[3]
            m = mask[m_off + heads * m_hs + np.arange(s)[None, :] * m_cs]
            scores = np.where(m.astype(bool), scores, -np.inf) if params["mask"] == "bool" else scores + m
        with np.errstate(invalid="ignore", divide="ignore"):
            top = scores.max(axis=1, keepdims=True)
            w = np.exp(scores - np.where(np.isneginf(top), 0, top))
            total = w.sum(axis=1, keepdims=True)
            result = np.where(total == 0, 0, (w @ vb) / total)
        out[o_off + heads * o_hs + np.arange(ev)[None, :]] = result.astype(out.dtype)


def _gemm_nbits(params: dict, reads, writes, scalars) -> None:
    """The gemm_nbits routine on flat arrays: the panel dequantized (ember.tir.nbits.dequantize),
    x w in float64, rounded to float32 once (act int8, int8_rows and int8_groups: as the operator's
    reference computes it)."""
    if params.get("act") == "int8_rows":
        return _gemm_nbits_rows(params, reads, writes, scalars)
    m, k, ncols, x_rs, o_rs, s_rs = (int(v) for v in scalars)
    bits = params["bits"]
    (x, x_off), *rest = reads
    act = params.get("act")
    if act in ("int8", "int8_groups"):
        (xq, q_off), (meta, t_off), *rest = rest
    (codes, c_off), *rest = rest
    width = PANEL if bits == 8 else PANEL // 2
    scales, offsets = _panel_scales(params, k, s_rs, rest)
    panel = codes[c_off:c_off + k * width].reshape(1, k, width)
    w = dequantize(panel, scales, offsets, bits).astype(np.float64)
    rows = np.arange(m)[:, None]
    if act == "int8_groups":
        groups = k // params["xgroup"]
        y = dequantize_groups(xq[q_off + rows * k + np.arange(k)[None, :]],
                              meta[t_off + rows * 2 * groups + np.arange(2 * groups)[None, :]]) @ w
    elif act == "int8" and m >= GEMM_NBITS_STREAM:
        ms = 1 + k // 32
        xq_rows, meta_rows = xq[q_off + rows * k + np.arange(k)[None, :]], meta[t_off + rows * ms + np.arange(ms)]
        y = int8_products(xq_rows, meta_rows, panel, scales, offsets, bits)
    else:
        y = x[x_off + rows * x_rs + np.arange(k)[None, :]].astype(np.float64) @ w
    if params["bias"]:
        bias, b_off = rest[-1]
        y = y + bias[b_off:b_off + PANEL]
    if act == "int8_groups":
        y = activate(y, params["activation"])
    (out, o_off), = writes
    out[o_off + rows * o_rs + np.arange(ncols)[None, :]] = y[:, :ncols].astype(out.dtype)


def _panel_scales(params: dict, k: int, s_rs: int, rest) -> tuple:
    """A panel's scales and offsets (None without zero points) from the reads after its codes."""
    group, cols = params["group"], np.arange(PANEL)[None, :]

    def per_group(arr, off):
        block = arr[off + np.arange(k // group if group else 1)[:, None] * s_rs + cols]
        return block if group else block[0]

    return per_group(*rest[0]), per_group(*rest[1]) if params["offsets"] else None


def _gemm_nbits_rows(params: dict, reads, writes, scalars) -> None:
    """act int8_rows on flat arrays: the rows quantized (quantize_rows), then each panel of
    packed codes (unpack_vnni) as act int8 computes it, plus the bias and the residual, each
    panel rounded to float32 (glu "silu": silu of the first half of the columns times the second;
    then the activation)."""
    m, k, n, x_rs, o_rs, s_rs, p_rs = (int(v) for v in scalars)
    bits, glu = params["bits"], params["glu"]
    (x, x_off), (codes, c_off), *rest = reads
    rows = np.arange(m)[:, None]
    xq, meta = quantize_rows(x[x_off + rows * x_rs + np.arange(k)[None, :]])
    width = PANEL if bits == 8 else PANEL // 2
    cols = 2 * n if glu else n  # the weight's
    y = np.zeros((m, cols), np.float32)
    for p in range(-(-cols // PANEL)):
        at = [(arr, off + p * PANEL) for arr, off in rest]
        scales, offsets = _panel_scales(params, k, s_rs, at)
        start = c_off + p * p_rs
        panel = unpack_vnni(codes[start:start + vnni_rows(k, params["group"], bits) * width].reshape(1, -1, width),
                            bits, k)
        ncols = min(PANEL, cols - p * PANEL)
        block = int8_products(xq, meta, panel, scales, offsets, bits)[:, :ncols]
        at = at[1 + params["offsets"]:]
        if params["bias"]:
            bias, b_off = at.pop(0)
            block = block + bias[b_off:b_off + ncols]
        if params["residual"]:
            res, r_off = at.pop(0)
            block = block + res[r_off + rows * o_rs + np.arange(ncols)[None, :]]
        y[:, p * PANEL:p * PANEL + ncols] = block
    if glu:
        gate = y[:, :n].astype(np.float64)
        y = gate / (1 + np.exp(-gate)) * y[:, n:]
    y = activate(y, params["activation"])
    (out, o_off), = writes
    out[o_off + rows * o_rs + np.arange(n)[None, :]] = y.astype(out.dtype)


def _winograd_input(params: dict, reads, writes, scalars) -> None:
    """winograd_input on flat arrays: ember.tir.winograd.transform_input, rounded to float32."""
    p0, count, rows, c, h, w, grid_h, grid_w, pad_t, pad_l, images = (int(v) for v in scalars)
    m, ib, r = params["m"], params["ib"], params["r"]
    (x, x_off), = reads
    (v, v_off), = writes
    plain = x[x_off:x_off + images * c * h * w].reshape(images, c // ib, h, w, ib).transpose(0, 1, 4, 2, 3)
    live = max(0, min(r, count - p0))
    tiles = np.zeros((r, (m + 2) ** 2, c))
    tiles[:live] = winograd.transform_input(plain.reshape(images, c, h, w), m, (pad_t, pad_l), (grid_h, grid_w),
                                            p0, live)
    view = v[v_off:v_off + (m + 2) ** 2 * rows * c].reshape((m + 2) ** 2, rows, c)
    view[:, p0:p0 + r] = tiles.transpose(1, 0, 2).astype(v.dtype)


def _winograd_product(params: dict, reads, writes, scalars) -> None:
    """winograd_product on flat arrays: ember.tir.winograd.transform_output in float64, the
    epilogue, rounded to float32 once."""
    p0, j, count, rows, ocb, oh, ow, grid_h, grid_w, images = (int(v) for v in scalars)
    m, c, ob, nb = params["m"], params["c"], params["ob"], params["nb"]
    taps = (m + 2) ** 2
    (v, v_off), (u, u_off), *rest = reads
    (y, y_off), = writes
    live = max(0, min(params["r"] * params["rg"], count - p0))
    tiles = v[v_off:v_off + taps * rows * c].reshape(taps, rows, c)[:, p0:p0 + live].transpose(1, 0, 2)
    panels = u[u_off:u_off + taps * ocb * c * ob].reshape(taps, ocb, c, ob)[:, j * nb:(j + 1) * nb]
    out = winograd.transform_output(tiles, panels, m)  # (live, nb * ob, m, m)
    if params["bias"]:
        bias, b_off = rest.pop(0)
        out = out + bias[b_off + j * nb * ob:b_off + (j + 1) * nb * ob].astype(np.float64)[None, :, None, None]
    shape = (images, ocb, oh, ow, ob)
    yv = y[y_off:y_off + images * ocb * oh * ow * ob].reshape(shape)
    res = rest[0][0][rest[0][1]:rest[0][1] + yv.size].reshape(shape) if params["residual"] else None
    img, ty, tx, _, _ = winograd.tile_origin(np.arange(p0, p0 + live), (grid_h, grid_w), m, (0, 0))
    for q in range(live):
        for i in range(m):
            for k in range(m):
                oy, ox = ty[q] * m + i, tx[q] * m + k
                if oy >= oh or ox >= ow:
                    continue
                value = out[q, :, i, k].reshape(nb, ob)
                if res is not None:
                    value = value + res[img[q], j * nb:(j + 1) * nb, oy, ox]
                if params["relu"]:
                    value = np.maximum(value, 0)
                yv[img[q], j * nb:(j + 1) * nb, oy, ox] = value


def _quantize_rows(params: dict, reads, writes, scalars) -> None:
    """The quantize_rows routine on flat arrays: the operator's reference on the rows."""
    m, k, x_rs = (int(v) for v in scalars)
    (x, x_off), = reads
    (xq, q_off), (meta, t_off) = writes
    q, t = quantize_rows(x[x_off + np.arange(m)[:, None] * x_rs + np.arange(k)[None, :]])
    xq[q_off:q_off + m * k] = q.reshape(-1)
    meta[t_off:t_off + t.size] = t.reshape(-1)


def _quantize_groups(params: dict, reads, writes, scalars) -> None:
    """The quantize_groups routine on flat arrays: the operator's reference on the rows."""
    m, k, x_rs = (int(v) for v in scalars)
    (x, x_off), = reads
    (xq, q_off), (meta, t_off) = writes
    q, t = quantize_groups(x[x_off + np.arange(m)[:, None] * x_rs + np.arange(k)[None, :]], params["group"])
    xq[q_off:q_off + m * k] = q.reshape(-1)
    meta[t_off:t_off + t.size] = t.reshape(-1)


PYTHON_ROUTINES = {ATTENTION: _attention, ATTENTION_DECODE: _attention_decode, GEMM_NBITS: _gemm_nbits,
                   QUANTIZE_ROWS: _quantize_rows, QUANTIZE_GROUPS: _quantize_groups,
                   WINOGRAD_INPUT: _winograd_input, WINOGRAD_PRODUCT: _winograd_product}
