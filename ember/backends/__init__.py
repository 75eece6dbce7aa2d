"""The backends: one registered object per target kind, which compiles for that kind.

    ember.target.as_target("c").backend        # the CPU C backend (ember.backends.c)
    ember.backends.get("python")               # the loop-IR interpreter (ember.backends.python)
    ember.backends.register(MyBackend())       # a backend of one's own, by its name

A backend (ember.backends.base.Backend) holds everything that differs between targets: how
kernels and the call program are rendered, built and loaded, the compiled-model class, the
graph and loop passes it runs. Everything above the target (the compiler, ember.build, the tile
launcher, the debug tools) asks `target.backend` and branches on no kind.

This module is the registry and nothing else, so that the ground layer (ember.target) can name it:
the backends ember ships are found by name in BUILTIN and imported on first use, each registering
itself. A new backend adds its module (or package) here, in BUILTIN.
"""

from __future__ import annotations

import importlib
import threading

from ..errors import ConfigError

BUILTIN = {"c": "ember.backends.c", "python": "ember.backends.python",
           "cuda": "ember.backends.cuda", "accel": "ember.backends.accel"}  # name -> the module that registers it

_registry: dict[str, object] = {}
_lock = threading.Lock()


def register(backend):
    """Make `backend` the backend of targets of kind `backend.name`; returns it."""
    with _lock:
        _registry[backend.name] = backend
    return backend


def get(name: str):
    """The backend registered under `name` (a built-in one is imported on first use)."""
    if name not in _registry and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    try:
        return _registry[name]
    except KeyError:
        raise ConfigError(f"no backend is registered for target {name!r}; backends: "
                          f"{sorted({*BUILTIN, *_registry})}") from None
