"""A launch like an earlier one, run without binding and specializing again (Triton's fast path).

The full path of a launch (binding the arguments to the signature, choosing the target, the
specialization key with the sources' globals, the compiled kernel from the table) costs a few
hundred microseconds of Python: longer than a row softmax runs on a GPU, so that a benchmark
timing launches measured the host. A launch that succeeded on the full path is remembered under a
cheap signature of its call: per argument, what the key reads of it (a tensor's type, dtype,
device (a CUDA array's typestr), writeable flag
and 16-byte alignment; an integer's width, whether it is 1 and whether 16 divides it; a
constexpr's value), the keywords and launch options given (the stream's value aside: it is
passed, not compiled), and the environment variables the compiler reads. A later launch of the
same signature, while every global the kernel reads is the same object and its specialization is
still the in-memory table's, binds the arguments by position, describes its tensors (tensor_arg,
device_tensor_arg: their checks still run) and calls the backend (`launch.run`); any other takes
the full path. A kernel with declared parameter types (whose values are range-checked at each
launch) always does, as does a launch while `compiler.launch` is replaced (a test's interpreter).
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np

from ... import config
from ..args import device_tensor_arg, tensor_arg
from ..function import LAUNCH_OPTIONS, KernelFunction
from ..language import dtypes as tld

L = importlib.import_module(f"{__package__}.launch")  # the module (the package's `launch` is its function)
ENV = (*(config.OPTIONS[n].env for n in ("interpret", "triton_debug", "debug", "cc", "cflags", "tile_mma")),
       "TRITON_INTERPRET", "TRITON_DEBUG")
LIMIT = 64  # signatures remembered per kernel (a kernel launched with ever new constexprs starts over)
_NONE = object()  # an argument the signature cannot describe: the full path


class Entry:
    """What a remembered launch needs: the compiled kernel, its target, the globals it was
    compiled against, and which parameters are passed at run time (tensors described again)."""

    def __init__(self, fn: KernelFunction, compiled: L.Compiled, target, runtime: list):
        self.compiled, self.target = compiled, target
        self.slots = tuple((*s, v) for s, v in L.global_slots(fn) if s is not None)
        # per run-time parameter: how its value is described again (a GPU tensor, a host one, a scalar)
        self.runtime = [(name, device_tensor_arg if isinstance(v, L.DeviceTensorArg) else tensor_arg
                         if isinstance(v, L.TensorArg) else None) for name, v in runtime]
        self.defaults = {p.name: p.default for p in fn.params}

    def valid(self) -> bool:
        if not L.in_table(self.compiled):
            return False
        for g, name, attr, value in self.slots:  # (launch.read_slot, inline: this runs at every launch)
            now = g.get(name, L.MISSING)
            if attr is not None and now is not L.MISSING:
                now = getattr(now, attr, L.MISSING)
            if now is not value:
                return False
        return True


def _int(v: int) -> tuple:
    width = 0 if -2**31 <= v < 2**31 else 1 if -2**63 <= v < 2**63 else 2
    return (int, width, v == 1, v % 16 == 0)


def _describe(p, v):
    """What the specialization reads of value v of parameter p (hashable), or _NONE."""
    torch = sys.modules.get("torch")
    if not p.is_constexpr:  # (a plain int and a torch tensor first: this runs for each argument of each launch)
        if type(v) is int:
            return _int(v)
        if torch is not None and type(v) is torch.Tensor:
            return torch.Tensor, v.dtype, v.device, v.data_ptr() % 16 == 0
    if p.is_constexpr or v is None or isinstance(v, str | tld.dtype | tld.constexpr):
        return type(v), v
    if isinstance(v, bool | np.bool_):
        return (bool,)
    if isinstance(v, int | np.integer):
        return _int(int(v))
    if isinstance(v, float | np.floating):
        return (type(v),)
    if isinstance(v, np.ndarray):
        return np.ndarray, v.dtype, v.flags.writeable, v.ctypes.data % 16 == 0
    if torch is not None and isinstance(v, torch.Tensor):
        return torch.Tensor, v.dtype, v.device, v.data_ptr() % 16 == 0
    cai = getattr(v, "__cuda_array_interface__", None)  # CuPy, Numba
    if cai is not None:
        return type(v), cai["typestr"], cai["data"][0] % 16 == 0
    return _NONE


def _environment() -> tuple:
    """The values of ENV's variables: read from the mapping behind os.environ where CPython has one
    (its `_data`, which every write to os.environ updates, under `encodekey`'s keys), a tenth of
    os.environ.get's time (4 of a launch's 28 us of CPU); through os.environ.get elsewhere."""
    data = getattr(os.environ, "_data", None)
    if data is None or _ENV_KEYS is None:
        return tuple(os.environ.get(e) for e in ENV)
    return tuple(data.get(k) for k in _ENV_KEYS)


_encode = getattr(os.environ, "encodekey", None)
_ENV_KEYS = None if _encode is None else tuple(_encode(e) for e in ENV)  # (as os.environ's mapping keys them)


def signature(fn: KernelFunction, args: tuple, kwargs: dict) -> tuple | None:
    """The launch's cheap signature (the module doc), or None where it takes the full path."""
    params = fn.params
    if len(args) > len(params) or any(p.declared is not None for p in params):
        return None
    parts = [_describe(p, v) for p, v in zip(params, args)]
    names = fn.__dict__.setdefault("_param_of", {p.name: p for p in params})
    for k, v in kwargs.items():
        p = names.get(k)
        if p is None and k not in LAUNCH_OPTIONS:
            return None
        parts.append((k, (None if k == "stream" else v) if p is None else _describe(p, v)))
        if parts[-1][1] is _NONE:
            return None
    if any(x is _NONE for x in parts):
        return None
    key = (len(args), *parts, *_environment())
    try:
        hash(key)
    except TypeError:  # an unhashable constexpr or option
        return None
    return key


def _genuine() -> bool:
    """Whether the package's `launch` is launch.py's (a test may put an interpreter there)."""
    return sys.modules[__package__].launch is L.launch


def again(fn: KernelFunction, args: tuple, kwargs: dict, grid) -> L.Compiled | None:
    """Run a launch the way a remembered one of the same signature ran; None when there is none
    (the caller takes the full path)."""
    table = fn.__dict__.get("_launches")
    if not table:
        return None
    key = signature(fn, args, kwargs)
    entry = None if key is None else table.get(key)
    if entry is None or not _genuine() or not entry.valid():
        return None
    bound = dict(entry.defaults)
    options = {}
    bound.update(zip((p.name for p in fn.params), args))
    for k, v in kwargs.items():
        (bound if k in bound else options)[k] = v
    grid = fn.grid_of(grid, bound)
    runtime = []
    for name, describe in entry.runtime:  # (the signature says where each tensor is: as on the full path)
        v = bound[name]
        runtime.append((name, describe(name, v) if describe is not None else tld.unwrap(v)))
    return L.run(fn, entry.compiled, runtime, grid, options, entry.target)


def remember(fn: KernelFunction, args: tuple, kwargs: dict, bound: dict, options: dict, compiled: L.Compiled,
             target) -> None:
    """Keep a launch that succeeded on the full path for `again`."""
    if not _genuine():
        return
    key = signature(fn, args, kwargs)
    if key is None:
        return
    spec, runtime = L.specialize(fn, bound, L.debug_mode(fn, options), target, options.get("num_warps") or 4,
                                 options.get("num_stages") or 3)
    if spec.key != compiled.key:
        return
    table = fn.__dict__.setdefault("_launches", {})
    if len(table) >= LIMIT:
        table.clear()
    table[key] = Entry(fn, compiled, target, runtime)
