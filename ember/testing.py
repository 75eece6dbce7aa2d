"""Test helpers, for ember's own tests and for users writing schedules: run a schedule on every
target and compare with a NumPy reference at stated tolerances; check that a schedule's trace
replays to the same function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .kernel import _prim_func, build
from .te.schedule import TESchedule
from .tir import dtype as dt
from .tir.expr import const
from .tir.schedule import Schedule, Trace
from .tir.structural import structural_equal


def random_array(shape, dtype: str = "float32", rng: np.random.Generator | None = None) -> np.ndarray:
    """Fresh random data (never all zeros): floats in [-1, 1), ints in a small signed range."""
    rng = rng or np.random.default_rng()
    if dt.is_float(dtype):
        return (rng.random(shape, dtype="float64") * 2 - 1).astype(dtype)
    if dt.is_bool(dtype):
        return rng.random(shape) < 0.5
    info = np.iinfo(np.dtype(dtype))
    return rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(dtype)


def verify_trace_roundtrip(sch) -> Schedule:
    """Replay the schedule's trace (through JSON) on a fresh schedule of the same function and
    check that the result is structurally identical. Returns the replayed schedule."""
    tir_sch = sch.sch if isinstance(sch, TESchedule) else sch
    fresh = Schedule(tir_sch.original)
    Trace.from_json(tir_sch.trace.to_json()).apply_to(fresh)
    if not structural_equal(fresh.mod, tir_sch.mod):
        raise AssertionError(
            f"replaying the trace did not rebuild the function\ntrace:\n{tir_sch.trace}\n"
            f"expected:\n{tir_sch.mod}\nreplayed:\n{fresh.mod}"
        )
    return fresh


def output_positions(func) -> list[int]:
    """Indices of the parameters the function writes."""
    from .tir.functor import visit_stmt
    from .tir.stmt import BufferStore

    written = set()
    visit_stmt(func.body, lambda s: written.add(s.buffer) if isinstance(s, BufferStore) else None)
    return [k for k, b in enumerate(func.params) if b in written]


def check_schedule(
    sch,
    args: Sequence | None,
    reference: Callable[..., np.ndarray | Sequence[np.ndarray]],
    *,
    inputs: Sequence[np.ndarray] | None = None,
    sizes: dict | None = None,
    targets: Sequence[str] = ("c", "python"),
    rtol: float = 1e-5,
    atol: float = 1e-6,
    rng: np.random.Generator | None = None,
    trace: bool = True,
) -> list[np.ndarray]:
    """Build `sch` for each target, run it on random inputs (or `inputs`), and compare every
    output with reference(*inputs). `sizes` gives symbolic dimensions their values."""
    func = _prim_func(sch, args, "main")
    outs = output_positions(func)
    rng = rng or np.random.default_rng()
    env = {v.name: const(n) for v, n in (sizes or {}).items()}

    def concrete(shape):
        from .tir.arith import simplify
        from .tir.expr import Const
        from .tir.functor import free_vars, substitute

        out = []
        for d in shape:
            missing = [v.name for v in free_vars(d) if v.name not in env]
            if missing:
                raise ValueError(f"give the sizes {missing} in sizes=")
            value = simplify(substitute(d, {v: env[v.name] for v in free_vars(d)}))
            assert isinstance(value, Const)
            out.append(int(value.value))
        return tuple(out)

    if inputs is None:
        inputs = [random_array(concrete(b.shape), b.dtype, rng) for k, b in enumerate(func.params) if k not in outs]
    expected = reference(*inputs)
    if isinstance(expected, np.ndarray):
        expected = [expected]
    results = []
    for target in targets:
        arrays, it = [], iter(inputs)
        for k, b in enumerate(func.params):
            arrays.append(random_array(concrete(b.shape), b.dtype, rng) if k in outs else next(it))
        kernel = build(func, None, target=target)
        kernel(*arrays)
        for pos, exp in zip(outs, expected):
            np.testing.assert_allclose(
                arrays[pos].astype("float64"), np.asarray(exp).astype("float64"), rtol=rtol, atol=atol,
                err_msg=f"target {target!r}, output {func.params[pos].name}",
            )
        results.append([arrays[p] for p in outs])
    if trace and isinstance(sch, TESchedule | Schedule):
        verify_trace_roundtrip(sch)
    return results[0]
