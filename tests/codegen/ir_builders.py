"""Building lowered loop-IR functions by hand, for codegen tests (there is no lowering here):
flat buffers, one index per access, loops of any kind, vector ramps and broadcasts."""

from __future__ import annotations

import numpy as np

from ember.tir import dtype as dt
from ember.tir.expr import Broadcast, Buffer, BufferLoad, Ramp, Var, const, convert
from ember.tir.stmt import BufferStore, For, PrimFunc, seq


def buf(name: str, shape, dtype: str = "float32", scope: str = "global") -> Buffer:
    return Buffer(name, tuple(convert(d) for d in shape), dtype, scope)


def loop(v: Var, extent, *body, kind: str = "serial", start=0) -> For:
    return For(v, convert(start), convert(extent), kind, seq(*body))


def store(b: Buffer, index, value) -> BufferStore:
    index = convert(index)
    lanes = dt.lanes_of(index.dtype)
    value = convert(value, dt.with_lanes(b.dtype, lanes) if isinstance(value, bool | int | float) else None)
    return BufferStore(b, value, (index,))


def load(b: Buffer, index) -> BufferLoad:
    return b.load((convert(index),))


def ramp(base, stride, lanes: int, dtype: str = "int64") -> Ramp:
    return Ramp(convert(base, dtype), convert(stride, dtype), lanes, dt.with_lanes(dtype, lanes))


def bcast(value, lanes: int, dtype: str | None = None) -> Broadcast:
    v = convert(value, dtype)
    return Broadcast(v, lanes, dt.with_lanes(v.dtype, lanes))


def func(name: str, params, *body) -> PrimFunc:
    return PrimFunc(name, tuple(params), seq(*body))


def rand(shape, dtype: str = "float32", rng: np.random.Generator | None = None, low=-4, high=4) -> np.ndarray:
    """Fresh random data, never all zeros: floats in [low, high), ints in [low, high] without 0
    when low < 0 < high (so they can divide), bools half true."""
    rng = rng or np.random.default_rng()
    if dt.is_bool(dtype):
        return rng.random(shape) < 0.5
    if dt.is_float(dtype):
        return rng.uniform(low, high, shape).astype(dtype)
    out = rng.integers(low, high + 1, shape)
    out[out == 0] = high
    return out.astype(dtype)


__all__ = ["buf", "loop", "store", "load", "ramp", "bcast", "func", "rand", "const", "Var"]
