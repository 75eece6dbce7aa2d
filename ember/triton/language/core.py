"""The builtins of the tile language, declared once with Triton's signatures.

A builtin has no semantics of its own: inside a kernel run by the interpreter, a call goes to the
interpreter's implementation of the same name (`semantics(impl)` makes `impl` the active one for
this thread); the compiler never calls a builtin, it recognizes it by `__triton_builtin__` and
binds the call's arguments with the signature declared here. Called outside a kernel, a builtin
says so. (This module shadows Python's `range`, `min`, `max`, `sum`, `abs`: the `builtins` module
has the originals.)
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import threading

from ...errors import TileError
from .dtypes import float32

_active = threading.local()


@contextlib.contextmanager
def semantics(impl):
    """Calls of builtins in this thread go to `impl` (an object with a method per builtin)."""
    previous = getattr(_active, "impl", None)
    _active.impl = impl
    try:
        yield impl
    finally:
        _active.impl = previous


def builtin(fn):
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        impl = getattr(_active, "impl", None)
        if impl is None:
            raise TileError(f"tl.{name} can only be called inside a kernel (a @triton.jit function)")
        return getattr(impl, name)(*args, **kwargs)

    call.__triton_builtin__ = name
    return call


# --- programs and blocks ---------------------------------------------------------------------------

@builtin
def program_id(axis): ...


@builtin
def num_programs(axis): ...


@builtin
def arange(start, end): ...


@builtin
def zeros(shape, dtype): ...


@builtin
def zeros_like(input): ...


@builtin
def full(shape, value, dtype): ...


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False): ...


# --- memory ------------------------------------------------------------------------------------------

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False): ...


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""): ...


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order): ...


@builtin
def advance(base, offsets): ...


@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None): ...


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None): ...


# --- linear algebra and reductions ---------------------------------------------------------------

@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=float32): ...


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None): ...


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False): ...


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False): ...


@builtin
def xor_sum(input, axis=None, keep_dims=False): ...


@builtin
def cumsum(input, axis=0, reverse=False): ...


@builtin
def cumprod(input, axis=0, reverse=False): ...


@builtin
def softmax(input, ieee_rounding=False): ...


# --- elementwise -------------------------------------------------------------------------------------

@builtin
def where(condition, x, y): ...


@builtin
def maximum(x, y, propagate_nan=None): ...


@builtin
def minimum(x, y, propagate_nan=None): ...


@builtin
def clamp(x, min, max, propagate_nan=None): ...


@builtin
def fma(x, y, z): ...


@builtin
def fdiv(x, y, ieee_rounding=False): ...


@builtin
def div_rn(x, y): ...


@builtin
def umulhi(x, y): ...


def _unary_math(name: str):
    def math_fn(x): ...

    math_fn.__name__ = math_fn.__qualname__ = name
    return builtin(math_fn)


exp, exp2, log, log2, sqrt, sqrt_rn, rsqrt, abs, sigmoid, erf, tanh, sin, cos, floor, ceil = (
    _unary_math(n) for n in ("exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "sigmoid",
                             "erf", "tanh", "sin", "cos", "floor", "ceil"))


# --- shapes ------------------------------------------------------------------------------------------

@builtin
def reshape(input, *shape, can_reorder=False): ...


@builtin
def view(input, *shape): ...


@builtin
def broadcast_to(input, *shape): ...


@builtin
def broadcast(input, other): ...


@builtin
def expand_dims(input, axis): ...


@builtin
def trans(input, *dims): ...


@builtin
def permute(input, *dims): ...


@builtin
def ravel(input, can_reorder=False): ...


@builtin
def cat(input, other, can_reorder=False): ...


# --- hints, checks and debugging -------------------------------------------------------------------

@builtin
def multiple_of(input, values): ...


@builtin
def max_contiguous(input, values): ...


@builtin
def max_constancy(input, values): ...


@builtin
def debug_barrier(): ...


@builtin
def static_assert(cond, msg=""): ...


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False): ...


@builtin
def device_assert(cond, msg="", mask=None): ...


@builtin
def device_print(prefix, *args, hex=False): ...


@builtin
def cdiv(x, div): ...


# --- loops -------------------------------------------------------------------------------------------

class range:
    """`for i in tl.range(start, end, step)`: a loop the compiler emits as a loop (num_stages,
    loop_unroll_factor and the like are accepted and do not matter on the CPU)."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step

    def __iter__(self):
        return iter(builtins.range(int(self.start), int(self.end), int(self.step)))


class static_range(range):
    """`for i in tl.static_range(n)`: a loop unrolled at compile time (its bounds are constexpr)."""


BUILTINS = {fn.__triton_builtin__: fn for fn in list(globals().values()) if hasattr(fn, "__triton_builtin__")}
# The builtins a block also has as methods, as Triton's tensor does (x.sum(axis=0), x.exp(), x.to(...)).
MEMBERS = ("sum", "max", "min", "argmax", "argmin", "xor_sum", "cumsum", "cumprod", "reshape", "view",
           "broadcast_to", "expand_dims", "trans", "permute", "ravel", "exp", "exp2", "log", "log2", "sqrt",
           "sqrt_rn", "rsqrt", "abs", "sigmoid", "erf", "tanh", "sin", "cos", "floor", "ceil", "softmax", "fma",
           "fdiv", "div_rn", "umulhi")
__all__ = [*BUILTINS, "range", "static_range"]
