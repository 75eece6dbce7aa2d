"""Tuning a GEMM or a convolution on an accelerator with the simulator's cycles as the measure:
the space is the tile sizes (multiples of the core intrinsic's that divide the GEMM and fit the
memories, twice over for the input tiles when double buffered) and double buffering; each
candidate is built, run on random operands, checked against NumPy (a convolution bit-exact),
and timed by the simulator (its cycles are exact for the model, so one run each). `tune_gemm`
and `tune_conv` report the best against the default schedule (one core tile, single
buffered)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np

from ..errors import TuneError
from ..kernel import build
from .conv import Conv2d, conv2d, padded_gemm, reference, weight_matrix
from .report import Report
from .schedules import BUFFERING, Tiles, gemm, intrinsic_shape
from .spec import Accelerator


@dataclass(frozen=True)
class Trial:
    tiles: Tiles
    buffering: str
    report: Report

    @property
    def cycles(self) -> int:
        return self.report.cycles

    def __str__(self):
        t = self.tiles
        return (f"tiles {t.ty}x{t.tx}x{t.tk}, {self.buffering} buffering: "
                f"{self.cycles} cycles, GEMM core {self.report.utilization:.1%} busy")


@dataclass(frozen=True)
class TuneResult:
    default: Trial
    best: Trial
    trials: tuple[Trial, ...]

    def __str__(self):
        return (f"default {self.default}\nbest    {self.best} "
                f"({self.default.cycles / self.best.cycles:.2f}x fewer cycles; {len(self.trials)} trials)")


def gemm_space(accel: Accelerator, m: int, n: int, k: int, epilogue: bool = False) -> list[tuple[Tiles, bool]]:
    """Every (tiles, buffering) whose tiles fit the accelerator's memories (with an epilogue, the
    accumulator holds the output tile and a bias row next to the GEMM's)."""
    im, in_, ik = intrinsic_shape(accel)

    def sizes(whole, step):
        return [d for d in range(step, whole + 1, step) if whole % d == 0]

    out = []
    for ty, tx, tk, buffering in itertools.product(sizes(m, im), sizes(n, in_), sizes(k, ik), BUFFERING):
        if buffering == "inputs" and tk == k:
            continue  # one k step: nothing to overlap within a tile
        inputs = 2 if buffering == "inputs" or buffering == "tiles" and tk == k else 1
        acc = 2 if buffering == "tiles" else 1
        if (inputs * ty * tk <= accel.inp_buffer.elements and inputs * tx * tk <= accel.wgt_buffer.elements
                and acc * (2 * ty * tx + tx if epilogue else ty * tx) <= accel.acc_buffer.elements):
            out.append((Tiles(ty, tx, tk), buffering))
    return out


def measure(accel: Accelerator, m: int, n: int, k: int, tiles: Tiles, buffering: str, operands) -> Trial:
    s, args = gemm(accel, m, n, k, tiles, buffering)
    f = build(s, args, target=accel)
    a, b, ref = operands
    c = np.zeros_like(ref)
    f(a, b, c)
    if not np.allclose(c, ref, rtol=1e-4, atol=1e-3):
        raise TuneError(f"{accel.name} GEMM with tiles {tiles} ({buffering} buffering) computed wrong values")
    return Trial(tiles, buffering, f.report())


def operands(accel: Accelerator, m: int, n: int, k: int, seed: int = 0):
    """Random A, B in the accelerator's layout and dtypes, and C = the GEMM of them in NumPy."""
    rng = np.random.default_rng(seed)
    core = accel.core

    def make(shape, dtype):
        if dtype.startswith("int"):
            return rng.integers(-128, 128, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)

    a = make((k, m) if core.inp_layout == "ki" else (m, k), core.inp_dtype)
    b = make((k, n) if core.wgt_layout == "kj" else (n, k), core.wgt_dtype)
    acc = np.dtype(core.acc_dtype)
    a2 = (a.T if core.inp_layout == "ki" else a).astype(acc)
    b2 = (b if core.wgt_layout == "kj" else b.T).astype(acc)
    return a, b, a2 @ b2


def tune_gemm(accel: Accelerator, m: int, n: int, k: int, *, trials: int = 16, seed: int = 0) -> TuneResult:
    """The best of `trials` candidates of gemm_space (all of it when smaller), drawn at random,
    against the default."""
    data = operands(accel, m, n, k, seed)
    return _search(gemm_space(accel, m, n, k), lambda tiles, db: measure(accel, m, n, k, tiles, db, data),
                   Tiles(*intrinsic_shape(accel)), trials, seed)


def tune_conv(accel: Accelerator, conv: Conv2d, shift: int, *, relu: bool = False, trials: int = 16,
              seed: int = 0) -> TuneResult:
    """tune_gemm's search for a quantized convolution (ember.accel.conv), each candidate bit-exact."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (conv.n, conv.h, conv.w, conv.c), dtype=np.int8)
    w = rng.integers(-128, 128, (conv.k, conv.r, conv.s, conv.c), dtype=np.int8)
    bias = rng.integers(-1 << 12, 1 << 12, conv.k, dtype=np.int32)
    ref = reference(x, w, bias, conv, shift, relu)
    wm = weight_matrix(accel, conv, w)
    m, n, k = padded_gemm(accel, conv)

    def run(tiles, buffering):
        s, args = conv2d(accel, conv, shift, relu=relu, tiles=tiles, buffering=buffering)
        f = build(s, args, target=accel)
        y = np.zeros((m, n), np.int8)
        f(x, wm, bias, y)
        if not np.array_equal(y[:len(ref)], ref):
            raise TuneError(f"{accel.name} convolution with tiles {tiles} ({buffering} buffering) is not bit-exact")
        return Trial(tiles, buffering, f.report())

    return _search(gemm_space(accel, m, n, k, epilogue=True), run, Tiles(*intrinsic_shape(accel)), trials, seed)


def _search(space, run, default_tiles: Tiles, trials: int, seed: int) -> TuneResult:
    default = (default_tiles, "single")
    if default not in space:
        raise TuneError(f"the default tiles {default_tiles} do not fit the accelerator's memories")
    picked = [c for c in random.Random(seed).sample(space, min(trials, len(space))) if c != default]
    base = run(*default)
    done = [base, *(run(tiles, buffering) for tiles, buffering in picked)]
    return TuneResult(base, min(done, key=lambda t: t.cycles), tuple(done))
