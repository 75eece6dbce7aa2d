"""ember: a deep-learning compiler.

    import ember
    from ember import te
    f = ember.build(s, [A, B, C], target="c")
"""

from __future__ import annotations

from . import te, tir
from .errors import ArgumentTypeError, BuildError, EmberError, LowerError, ScheduleError, ShapeError
from .kernel import build, lower

__version__ = "0.1.0"


def bench(f, *args, **kwargs):
    """Time a kernel: warm-up, repeats, median (seconds in `.median`)."""
    from .runtime.bench import bench as _bench

    return _bench(f, *args, **kwargs)


__all__ = [
    "ArgumentTypeError", "BuildError", "EmberError", "LowerError", "ScheduleError", "ShapeError",
    "bench", "build", "lower", "te", "tir",
]
