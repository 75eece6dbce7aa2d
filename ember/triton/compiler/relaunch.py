"""A launch like an earlier one, run without binding and specializing again (Triton's fast path).

The full path of a launch (binding the arguments to the signature, choosing the target, the
specialization key with the sources' globals, the compiled kernel from the table) costs a few
hundred microseconds of Python: longer than a row softmax runs on a GPU, so that a benchmark
timing launches measured the host. A launch that succeeded on the full path is remembered under a
cheap signature of its call: per argument, what the key reads of it (a tensor's type, dtype,
device (a CUDA array's typestr and GPU), writeable flag
and 16-byte alignment; an integer's width, whether it is 1 and whether 16 divides it; a
constexpr's value), the keywords and launch options given (but `stream=`: it is passed, not
compiled), and the environment variables the compiler reads. A later launch of the
same signature, while every global the kernel reads is the same object and its specialization is
still the in-memory table's, binds the arguments by position, describes its tensors (tensor_arg,
device_tensor_arg: their checks still run) and calls the backend (`launch.run`); any other takes
the full path. A kernel with declared parameter types (whose values are range-checked at each
launch) always does, as does a launch while `compiler.launch` is replaced (a test's interpreter).

A backend that launches a remembered signature as it is (the GPU's `Backend.direct_tile`, for a
kernel without checks: what the call's checks read, each tensor's type, dtype and GPU, is in the
signature) is given each tensor's address and each scalar's value where the signature says they
are, nothing bound or described again: a few microseconds of Python, as Triton's launcher,
where binding and describing cost tens (`benchmarks/launch_host.py`).
"""

from __future__ import annotations

import importlib
import operator
import os
import sys

import numpy as np

from ... import config
from ..args import device_tensor_arg, tensor_arg
from ..function import LAUNCH_OPTIONS, KernelFunction
from ..language import dtypes as tld

L = importlib.import_module(f"{__package__}.launch")  # the module (the package's `launch` is its function)
ENV = (*(config.OPTIONS[n].env for n in ("interpret", "triton_debug", "debug", "cc", "cflags", "tile_mma",
                                                "tile_fragment_stores")),
       "TRITON_INTERPRET", "TRITON_DEBUG")
LIMIT = 64  # signatures remembered per kernel (a kernel launched with ever new constexprs starts over)
_NONE = object()  # an argument the signature cannot describe: the full path


class Entry:
    """What a remembered launch needs: the compiled kernel, its target, the globals it was
    compiled against, and which parameters are passed at run time (tensors described again);
    `direct`, the backend's launcher taking their addresses and values as they are (a GPU's:
    Backend.direct_tile), with `sources`, where a launch of this signature holds each of them
    (its position among the positional arguments, else its name) and its kind (a torch tensor,
    another GPU array, a scalar), tensors first as the kernel takes them."""

    def __init__(self, fn: KernelFunction, compiled: L.Compiled, target, runtime: list, given: int):
        self.compiled, self.target = compiled, target
        self.globals = _globals_check(fn)
        # per run-time parameter: how its value is described again (a GPU tensor, a host one, a scalar)
        self.runtime = [(name, device_tensor_arg if isinstance(v, L.DeviceTensorArg) else tensor_arg
                         if isinstance(v, L.TensorArg) else None) for name, v in runtime]
        self.defaults = {p.name: p.default for p in fn.params}
        self.direct = target.backend.direct_tile(compiled, runtime)
        position = {p.name: p.index for p in fn.params}
        kinds = [(name, TORCH if v.torch else ARRAY) for name, v in runtime if isinstance(v, L.DeviceTensorArg)]
        kinds += [(name, SCALAR) for name, v in runtime if not isinstance(v, L.TensorArg | L.DeviceTensorArg)]
        self.sources = [(position[n] if position[n] < given else n, kind) for n, kind in kinds]

    def values(self, args: tuple, kwargs: dict) -> list:
        """What `direct` takes of a launch of this signature: each tensor's address, then each
        scalar's value, read where the signature says they are (nothing described again)."""
        defaults, out = self.defaults, []
        for where, kind in self.sources:
            v = args[where] if type(where) is int else kwargs.get(where, defaults[where])
            out.append(tld.unwrap(v) if kind == SCALAR else v.data_ptr() if kind == TORCH
                       else v.__cuda_array_interface__["data"][0])
        return out

    def valid(self) -> bool:
        """Whether the specialization is still the table's and every global its kernel reads is the
        object it was compiled against (a getter per globals dict, then per object whose attributes
        it reads, each compared element by element for identity: in C, whatever their number)."""
        if not L.in_table(self.compiled):
            return False
        try:
            for getter, source, values in self.globals:
                if not all(map(operator.is_, getter(source), values)):
                    return False
        except (KeyError, AttributeError):  # a global or an attribute gone
            return False
        return True


def _globals_check(fn: KernelFunction) -> list[tuple]:
    """(getter, what it reads, the values read now) for Entry.valid: the names read from each
    globals dict first, then the attributes read from each of their values (which those names
    still holding the same objects makes the same objects to read); an attribute missing now is
    checked to stay missing."""
    names: dict[int, tuple[dict, list]] = {}
    attributes: dict[tuple[int, str], tuple[object, list]] = {}
    absent = []
    for slot, value in L.global_slots(fn):
        if slot is None:
            continue
        g, name, attr = slot
        if attr is None:
            names.setdefault(id(g), (g, []))[1].append(name)
        elif value is L.MISSING:
            absent.append((_absent(attr), g.get(name), (L.MISSING,)))
        else:
            attributes.setdefault((id(g), name), (g[name], []))[1].append(attr)
    checks = []
    for (source, keys), get in [*[(v, operator.itemgetter) for v in names.values()],
                                *[(v, operator.attrgetter) for v in attributes.values()]]:
        getter = get(*[*dict.fromkeys(keys)] * 2)  # (twice: a getter of one name returns its value, not a tuple)
        checks.append((getter, source, getter(source)))
    return checks + absent


def _absent(attr: str):
    return lambda source: (getattr(source, attr, L.MISSING),)


SCALAR, TORCH, ARRAY = 0, 1, 2  # a run-time value's kind: a scalar, a torch GPU tensor, another GPU array


def _int(v: int) -> tuple:
    width = 0 if -2**31 <= v < 2**31 else 1 if -2**63 <= v < 2**63 else 2
    return (int, width, v == 1, v % 16 == 0)


def _describe(p, v):
    """What the specialization reads of value v of parameter p, or _NONE."""
    if p.is_constexpr or v is None or isinstance(v, str | tld.dtype | tld.constexpr):
        return type(v), v
    torch = sys.modules.get("torch")
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
    cai = getattr(v, "__cuda_array_interface__", None)  # CuPy, Numba (and its GPU: device_tensor_arg's)
    if cai is not None:
        return type(v), cai["typestr"], cai["data"][0] % 16 == 0, getattr(getattr(v, "device", None), "id", 0)
    return _NONE


def environment() -> tuple:
    """The values of ENV's variables: read from the mapping behind os.environ where CPython has one
    (its `_data`, which every write to os.environ updates, under `encodekey`'s keys), a tenth of
    os.environ.get's time (4 of a launch's 28 us of CPU); through os.environ.get elsewhere."""
    data = getattr(os.environ, "_data", None)
    if data is None or _ENV_KEYS is None:
        return tuple(os.environ.get(e) for e in ENV)
    return tuple(map(data.get, _ENV_KEYS))


_encode = getattr(os.environ, "encodekey", None)
_ENV_KEYS = None if _encode is None else tuple(_encode(e) for e in ENV)  # (as os.environ's mapping keys them)


def signature(fn: KernelFunction, args: tuple, kwargs: dict) -> tuple | None:
    """The launch's cheap signature (the module doc), or None where it takes the full path (as
    where it is unhashable: a constexpr or an option that is)."""
    params = fn.params
    facts = fn.__dict__.get("_signature_facts")
    if facts is None:  # (by name, and whether a parameter has a declared type: once per kernel)
        facts = fn.__dict__["_signature_facts"] = ({p.name: p for p in params},
                                                   any(p.declared is not None for p in params))
    names, declared = facts
    if len(args) > len(params) or declared:
        return None
    torch = sys.modules.get("torch")
    tensor = torch.Tensor if torch is not None else ()  # (nothing is an instance of no type)
    parts = []
    for p, v in zip(params, args):  # (a plain int and a torch tensor first: this runs for each argument of each launch)
        if p.is_constexpr:
            parts.append((type(v), v))
        elif type(v) is int:
            parts.append(_int(v))
        elif isinstance(v, tensor):
            parts.append((torch.Tensor, v.dtype, v.device, v.data_ptr() % 16 == 0))
        else:
            part = _describe(p, v)
            if part is _NONE:
                return None
            parts.append(part)
    for k, v in kwargs.items():
        p = names.get(k)
        if p is None and k not in LAUNCH_OPTIONS:
            return None
        if p is None and k == "stream":  # (passed, not compiled: a launch on another stream is the same)
            continue
        parts.append((k, v if p is None else _describe(p, v)))
        if parts[-1][1] is _NONE:
            return None
    return (len(args), *parts, *environment())  # (unhashable where a constexpr or an option is: the full path)


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
    try:
        entry = None if key is None else table.get(key)
    except TypeError:  # an unhashable constexpr or option
        return None
    if entry is None or not _genuine() or not entry.valid():
        return None
    defaults = entry.defaults
    if callable(grid) or entry.direct is None:
        bound = dict(defaults)
        bound.update(zip((p.name for p in fn.params), args))
        bound.update((k, v) for k, v in kwargs.items() if k in defaults)
        grid = fn.grid_of(grid, bound)
    else:
        grid = fn.grid_of(grid, None)
    if entry.direct is not None:
        entry.direct(entry.values(args, kwargs), grid, None if "stream" in defaults else kwargs.get("stream"))
        return entry.compiled
    options = {k: v for k, v in kwargs.items() if k not in defaults}
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
    try:
        hash(key)
    except TypeError:  # an unhashable constexpr or option
        return
    spec, runtime = L.specialize(fn, bound, L.debug_mode(fn, options), target, options.get("num_warps") or 4,
                                 options.get("num_stages") or 3)
    if spec.key != compiled.key:
        return
    table = fn.__dict__.setdefault("_launches", {})
    if len(table) >= LIMIT:
        table.clear()
    table[key] = Entry(fn, compiled, target, runtime, len(args))
