"""The call path in C: a model's common calls check their arguments and reach its entry function
in well under a microsecond of Python.

A call through ctypes spends most of its time in Python: wrapping every array's pointer, packing
pointer arrays, converting arguments (about 20 us per call for a one-add model, ten times its
native entry). So ember compiles a small CPython extension, once per build cache (not per
model; ember.runtime.build caches it in <cache_dir>/extensions by its source, the compiler and
its flags, with the Python and NumPy versions in the source), and gives each model a `Caller`
built from its signature (ember.runtime.fastcall_source), on its second call (a model called
once never waits for the extension's build). A call hands the argument tuple to the Caller: it
checks count, kind, dtype, rank, contiguity and every dimension (symbols bound and checked against their
ranges, expressions of symbols evaluated), allocates the outputs (fresh NumPy arrays; torch
tensors over them when an input is a torch tensor), takes a workspace from the model's pool of
free ones (one per concurrent call), and runs the entry with the GIL released. Anything else (a
check that fails, a tensor to copy, an allocation that fails) returns NotImplemented before any
native code runs, and CompiledModel's Python path redoes the call: the errors and the copies are
the Python path's, one implementation.

Where the extension cannot be built (no Python.h on this machine, no C compiler, a build that
fails) or the fast_call option is off (EMBER_FAST_CALL=0), every call takes the Python path;
`extension()` says which (None: the Python path).

Options read (ember.config): fast_call, cc, cache_dir.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading
import weakref

import numpy as np

from .. import config, dims
from ..errors import EmberError
from . import fork
from .fastcall_source import SOURCE

NAME = "_ember_fastcall"
CFLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11")


def python_include() -> str:
    """The folder that holds Python.h (it may be missing: a Python without its headers)."""
    return sysconfig.get_paths()["include"]


def extension():
    """The compiled extension module, or None when it cannot be built here (see the module doc)."""
    with _building:  # one build and one load per process, whichever thread asks first
        return _extension()


_building = threading.Lock()
os.register_at_fork(after_in_child=_building._at_fork_reinit)  # (a fork while another thread builds)


@functools.cache
def _extension():
    include = python_include()
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return None
    from .build import build_library

    header = f"/* ember call extension: Python {sys.version.split()[0]} ({sys.implementation.cache_tag}), " \
             f"NumPy {np.__version__} */\n"
    try:
        path = build_library(header + SOURCE, cflags=[*CFLAGS, f"-I{include}", f"-I{np.get_include()}"],
                             folder="extensions")
        loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(NAME, loader))
        loader.exec_module(module)
    except (EmberError, ImportError, OSError):
        return None
    module.set_forked(fork.forked_thread() or 0)  # (a child of fork loading it for the first time)
    os.register_at_fork(after_in_child=lambda: module.set_forked(fork.forked_thread() or 0))
    return module


def no_fast_path(inputs: tuple, num_threads: int):
    """The Caller of a model without one: every call takes the Python path."""
    return NotImplemented


def not_yet(inputs: tuple, num_threads: int):
    """The Caller of a model not called yet (CompiledModel makes its Caller on its second call)."""
    return NotImplemented


def caller(model):
    """The Caller of a CompiledModel (`caller(inputs, num_threads)`: its outputs, or NotImplemented
    for the Python path), or `no_fast_path`."""
    ext = extension() if config.get("fast_call") and model._entry_address is not None else None
    if ext is None:
        return no_fast_path
    spec = model.spec
    symbols = list(spec.symbols)
    for t in spec.inputs:  # symbols bound by inputs but not handed to the entry (none, today)
        symbols += [d for d in t.shape if dims.is_symbol(d) and d not in symbols]
    polys: list[list[tuple[int, list[int]]]] = []

    def code(d) -> tuple[int, int]:
        if isinstance(d, int):
            return 0, d
        if dims.is_symbol(d):
            return 1, symbols.index(d)
        terms = dims.parse(d).terms
        if any(s not in symbols for m, _ in terms for s in m):
            symbols.extend(s for m, _ in terms for s in m if s not in symbols)  # never bound: the Python path
        polys.append([(c, [symbols.index(s) for s in m]) for m, c in terms])
        return 2, len(polys) - 1

    inputs = [(np.dtype(t.dtype), [code(d) for d in t.shape]) for t in spec.inputs]
    outputs = [(np.dtype(t.dtype), [code(d) for d in t.shape]) for t in spec.outputs]
    ranges = []
    for s in symbols:
        lo, hi = spec.ranges.get(s, (0, None))
        ranges.append((lo, -1 if hi is None else hi))
    # the Caller reaches the model through a weak reference: the model holds the Caller, and a
    # cycle through it (a C object the garbage collector does not traverse) would never be freed
    this = weakref.ref(model)

    def layout(key: tuple[int, ...]):
        return this()._layout_of(key)

    def status_error(rc: int) -> Exception:
        return this().status_error(rc, "entry function")

    return ext.Caller(model._entry_address, model._weight_ptrs.ctypes.data, inputs, outputs, ranges,
                      len(spec.symbols), polys, layout if spec.symbols else model._layout_of(()), status_error,
                      model.plan.align)


def attach_torch(fast, spec) -> bool:
    """Let `fast` (a model's Caller) take CPU torch tensors, unless a dtype has no torch twin with
    a NumPy view (bfloat16 goes through the Python path); whether it does now."""
    if fast is no_fast_path or fast is not_yet:
        return False
    import torch

    dtypes = [getattr(torch, t.dtype, None) for t in (*spec.inputs, *spec.outputs)]
    if any(not isinstance(d, torch.dtype) or d == torch.bfloat16 for d in dtypes):
        return False
    fast.attach_torch(torch.Tensor, torch.from_numpy, torch.strided,
                      [(d, d.is_complex) for d in dtypes[:len(spec.inputs)]])
    return True
