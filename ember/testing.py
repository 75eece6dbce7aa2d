"""Test helpers, for ember's own tests and for users writing schedules or operators: run a
schedule on every target and compare with a NumPy reference at stated tolerances; check that a
schedule's trace replays to the same function; build one operator application as a kernel
(`build_op`) and check it against the operator's NumPy reference, and against PyTorch when given
(`check_op`):

    check_op("softmax", [x], {"axis": 1}, rtol=1e-5, atol=1e-6, torch_fn=lambda t: t.softmax(1))
    check_op_sizes("relu", [TensorType(("n", 8))], None, [[x3], [x5]], rtol=0, atol=0)

Input types default to the arrays' shapes and dtypes; `check_op_sizes` builds one kernel for
input types with symbol names (("n", 8)) and runs it at the sizes of each set of inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from . import dims
from .errors import ShapeError
from .graph.core import TensorType
from .kernel import _prim_func, build
from .ops.registry import get, infer_types
from .schedules.apply import node_kernel
from .target import Target, as_target
from .te.schedule import TESchedule
from .tir import dtype as dt
from .tir.expr import const
from .tir.schedule import Schedule, Trace
from .tir.structural import structural_equal


def random_array(shape, dtype: str = "float32", rng: np.random.Generator | None = None) -> np.ndarray:
    """Fresh random data (never all zeros): floats in [-1, 1), ints in a small signed range; an
    array even of shape () (a kernel's 0-d output buffer), not a NumPy scalar."""
    rng = rng or np.random.default_rng()
    if dt.is_float(dtype):
        return np.asarray((rng.random(shape, dtype="float64") * 2 - 1).astype(dtype))
    if dt.is_bool(dtype):
        return np.asarray(rng.random(shape) < 0.5)
    lo, hi = dt.int_range(dtype)
    return np.asarray(rng.integers(max(lo, -100), min(hi, 100) + 1, size=shape).astype(dtype))


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
    from .tir.stmt import BufferStore, CallRoutine

    written = set()

    def note(s):
        if isinstance(s, BufferStore):
            written.add(s.buffer)
        elif isinstance(s, CallRoutine):  # a tensorized call
            written.update(p.buffer for p in s.writes)

    visit_stmt(func.body, note)
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
                raise ShapeError(f"give the sizes {missing} in sizes=")
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


# -- operators ---------------------------------------------------------------------------------
class OpKernel:
    """A built operator application: `run(*inputs)` allocates the outputs, runs, returns them."""

    def __init__(self, name: str, in_types: Sequence[TensorType], attrs: Mapping | None, target: str | Target):
        self.name, self.in_types, self.target = name, list(in_types), target
        self.attrs, self.out_types = infer_types(name, self.in_types, attrs)
        s, args = node_kernel(name, self.in_types, self.attrs, self.out_types, target=as_target(target))
        self.kernel = build(s, args, target=target)

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        sizes = bind_symbols(self.in_types, inputs)
        # outputs start as garbage, so an element the kernel forgets to write shows
        outs = [garbage(tuple(dims.evaluate(d, sizes) for d in t.shape), t.dtype) for t in self.out_types]
        self.kernel(*inputs, *outs)
        return outs


def build_op(name: str, in_types: Sequence[TensorType], attrs: Mapping | None = None,
             target: str | Target = "c") -> OpKernel:
    return OpKernel(name, in_types, attrs, target)


def bind_symbols(in_types: Sequence[TensorType], arrays: Sequence[np.ndarray]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for t, a in zip(in_types, arrays):
        for d, n in zip(t.shape, a.shape):
            if dims.is_symbol(d) and sizes.setdefault(d, n) != n:
                raise ShapeError(f"symbol {d!r} is bound to both {sizes[d]} and {n}")
    return sizes


def garbage(shape, dtype: str) -> np.ndarray:
    """NaN, or random integers: what an output holds before a kernel writes it."""
    if dt.is_float(dtype):
        return np.full(shape, np.nan, dtype)
    return np.random.default_rng().integers(0, 2 if dt.is_bool(dtype) else 100, size=shape).astype(dtype)


def assert_close(actual: np.ndarray, expected, rtol: float, atol: float, what: str) -> None:
    """Floats within rtol/atol (NaN equal to NaN, infinities equal), everything else exact."""
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if dt.is_float(actual.dtype.name) or dt.is_float(expected.dtype.name):
        np.testing.assert_allclose(actual.astype("float64"), expected.astype("float64"), rtol=rtol, atol=atol,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def check_op(name: str, inputs: Sequence[np.ndarray], attrs: Mapping | None, rtol: float, atol: float,
             torch_fn: Callable | None = None, *, targets: Sequence[str | Target] = ("c",),
             in_types: Sequence[TensorType] | None = None, torch_atol: float | None = None) -> list[np.ndarray]:
    """Run operator `name` on `inputs` on every target and compare each output with the
    operator's reference (whose output dtypes must be the inferred ones) and with
    `torch_fn(*torch_tensors)` when given (within `torch_atol` where torch's own float32 result
    is known to be further from the exact one than ember's). Returns the first target's outputs."""
    inputs = [np.asarray(x) for x in inputs]
    in_types = list(in_types or [TensorType(x.shape, x.dtype.name) for x in inputs])
    return check_op_sizes(name, in_types, attrs, [inputs], rtol, atol, torch_fn, targets=targets,
                          torch_atol=torch_atol)[0]


def check_op_sizes(name: str, in_types: Sequence[TensorType], attrs: Mapping | None,
                   input_sets: Sequence[Sequence[np.ndarray]], rtol: float, atol: float,
                   torch_fn: Callable | None = None, *, targets: Sequence[str | Target] = ("c",),
                   torch_atol: float | None = None) -> list[list[np.ndarray]]:
    """check_op with one kernel per target, built once for `in_types` (symbolic dimensions
    included) and run on every set of inputs. Returns the first target's outputs per set."""
    bound, out_types = infer_types(name, list(in_types), attrs)
    kernels = [build_op(name, in_types, attrs, target) for target in targets]
    results = []
    for inputs in input_sets:
        inputs = [np.asarray(x) for x in inputs]
        expected = get(name).reference(inputs, bound)
        for k, (e, t) in enumerate(zip(expected, out_types)):
            assert np.asarray(e).dtype.name == t.dtype, f"{name}: reference output {k} is {e.dtype}, inferred {t.dtype}"
        torch_expected = _run_torch(torch_fn, inputs) if torch_fn is not None else None
        shapes = [x.shape for x in inputs]
        for kernel in kernels:
            outs = kernel.run(*inputs)
            what = f"{name} on {kernel.target}, inputs of shapes {shapes}: output"
            for k, out in enumerate(outs):
                assert_close(out, expected[k], rtol, atol, f"{what} {k} vs the reference")
                if torch_expected is not None:
                    assert_close(out, torch_expected[k], rtol, atol if torch_atol is None else torch_atol,
                                 f"{what} {k} vs torch")
            if kernel is kernels[0]:
                results.append(outs)
    return results


def _run_torch(fn: Callable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import torch

    out = fn(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
    outs = out if isinstance(out, list | tuple) else [out]
    return [o.detach().numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outs]


def magnitude_rows(kind: str, shape=(4, 96), seed=0) -> np.ndarray:
    """Random float32 rows of one kind of magnitude (MAGNITUDES), for the numerics of reductions at
    the edges of float32: a power of ten, rows of mixed magnitudes, an outlier per row, or rows
    of mean 1e20 and spread 1e14. `shape[0]` is 4."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    match kind:
        case "mixed":  # rows of 1e20, 1, 1e-20 and 1e30
            x = x * np.array([1e20, 1.0, 1e-20, 1e30]).reshape(4, *([1] * (x.ndim - 1)))
        case "outlier":  # ordinary rows, one element 1e20 (or -1e30) in each
            flat = x.reshape(x.shape[0], -1)
            flat[:, 7] = [1e20, -1e30, 1e20, -1e20]
        case "shifted":  # a mean of 1e20, a spread of 1e14
            x = 1e20 + x * 1e14
        case _:
            x = x * float(kind)
    return x.astype("float32")


MAGNITUDES = ["1e20", "1e-20", "1e30", "mixed", "outlier", "shifted", "1"]
