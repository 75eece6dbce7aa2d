"""Finding the pass at fault: which graph pass makes a model's output wrong.

    result = bisect("model.onnx")           # or a Graph, or a torch.nn.Module with example_inputs
    print(result)                           # every configuration's error, then the verdict
    result.culprit                          # "fuse", say, or None

The reference is the model compiled at opt_level 0 (no pass). Then the pipeline's passes (those of
the highest level, or `passes`) are enabled cumulatively in pipeline order: the first pass whose
addition takes the output beyond tolerance is the culprit (passes run in order, so this names
the first to break it even when later passes depend on it). Each pass is also switched off alone,
with all the others on: `fixes` names the passes without which the output is right again, which
tells a pass that breaks alone from one that only breaks in company.

A configuration is within tolerance when every output has the reference's shape and passes
numpy.allclose(out, ref, rtol, atol, equal_nan=True); a configuration that fails to compile
counts as wrong, with its error recorded. Inputs are `example_inputs`, or fresh random arrays
(ember.testing.random_array) of the graph's input types, symbolic dimensions set to
SYMBOL_SIZE; give example_inputs where random values are not valid inputs (token ids, say).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import dims
from ..compiler import compile_graph
from ..errors import ConfigError
from ..frontend import import_model
from ..graph.core import Graph
from ..passes.pipeline import PIPELINES
from ..testing import random_array

SYMBOL_SIZE = 2


@dataclass(frozen=True)
class Trial:
    """One configuration: the passes run, the largest absolute error against the reference
    (inf for a wrong shape, a NaN mismatch or a failure), and whether it is within tolerance."""

    label: str
    passes: tuple[str, ...]
    max_error: float
    ok: bool
    failure: str | None = None

    def __str__(self):
        what = f"failed: {self.failure}" if self.failure else f"max abs error {self.max_error:.3g}"
        return f"  [{'ok' if self.ok else 'WRONG'}] {self.label:<28} {what}"


@dataclass(frozen=True)
class BisectResult:
    passes: tuple[str, ...]  # the pipeline, in order
    cumulative: tuple[Trial, ...]  # passes[:k + 1] for each k
    one_off: tuple[Trial, ...]  # all passes but passes[k] for each k
    rtol: float
    atol: float

    @property
    def culprit(self) -> str | None:
        """The first pass whose addition takes the output beyond tolerance, or None."""
        return next((p for p, t in zip(self.passes, self.cumulative) if not t.ok), None)

    @property
    def fixes(self) -> tuple[str, ...]:
        """The passes without which (all others on) the output is within tolerance again."""
        if all(t.ok for t in self.cumulative):
            return ()
        return tuple(p for p, t in zip(self.passes, self.one_off) if t.ok)

    def __str__(self):
        lines = [f"reference: opt_level 0; tolerance rtol={self.rtol:g}, atol={self.atol:g}",
                 "passes enabled in order:", *map(str, self.cumulative),
                 "one pass disabled:", *map(str, self.one_off)]
        if self.culprit is None:
            lines.append("verdict: no pass changes the output beyond tolerance")
        else:
            lines.append(f"verdict: pass {self.culprit!r} is the first to change the output beyond tolerance")
            if self.fixes:
                lines.append(f"  (disabling {' or '.join(map(repr, self.fixes))} alone gives the right result)")
        return "\n".join(lines)


def bisect(model, example_inputs: Sequence | None = None, *, rtol: float = 1e-4, atol: float = 1e-4,
           passes: Sequence[str] | None = None) -> BisectResult:
    """Compile `model` (a Graph, an ONNX model path or ModelProto, or a torch.nn.Module with
    example_inputs) with the passes enabled one by one and switched off one at a time; see the
    module doc."""
    graph = import_model(model, None if example_inputs is None else tuple(example_inputs), "ember.debug.bisect")
    inputs = list(example_inputs) if example_inputs is not None else random_inputs(graph)
    level = max(PIPELINES)
    pipeline = tuple(passes) if passes is not None else tuple(PIPELINES[level])
    unknown = [p for p in pipeline if p not in PIPELINES[level]]
    if unknown:
        raise ConfigError(f"passes {unknown} are not in the opt_level {level} pipeline {PIPELINES[level]}")
    reference = _outputs(compile_graph(graph, opt_level=0, name="reference"), inputs)

    def trial(label: str, enabled: Sequence[str]) -> Trial:
        disabled = [p for p in PIPELINES[level] if p not in enabled]
        try:
            got = _outputs(compile_graph(graph, opt_level=level, disabled_passes=disabled, name="bisect"), inputs)
        except Exception as e:  # noqa: BLE001 (a pass that breaks the build is a pass at fault)
            return Trial(label, tuple(enabled), math.inf, False, f"{type(e).__name__}: {e}")
        return Trial(label, tuple(enabled), *_compare(got, reference, rtol, atol))

    cumulative = tuple(trial(f"+ {p}", pipeline[:k + 1]) for k, p in enumerate(pipeline))
    one_off = tuple(trial(f"- {p}", pipeline[:k] + pipeline[k + 1:]) for k, p in enumerate(pipeline))
    return BisectResult(pipeline, cumulative, one_off, rtol, atol)


def random_inputs(graph: Graph) -> list[np.ndarray]:
    """Fresh random arrays of the graph's input types, every symbol SYMBOL_SIZE (a dimension that
    is an expression of symbols, "past + 1", evaluated so)."""
    symbols = {s: SYMBOL_SIZE for v in graph.inputs for d in v.shape for s in dims.symbols_of(d)}
    return [random_array(tuple(dims.evaluate(d, symbols) for d in v.shape), v.dtype) for v in graph.inputs]


def _outputs(cm, inputs) -> list[np.ndarray]:
    out = cm(*inputs)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def _compare(got: list[np.ndarray], ref: list[np.ndarray], rtol: float, atol: float) -> tuple[float, bool]:
    """(largest absolute error, within tolerance) over all outputs."""
    worst, ok = 0.0, True
    for g, r in zip(got, ref, strict=True):
        if g.shape != r.shape:
            return math.inf, False
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        nan_mismatch = np.isnan(g64) != np.isnan(r64)
        if nan_mismatch.any():
            return math.inf, False
        with np.errstate(invalid="ignore"):
            diff = np.where((g64 == r64) | np.isnan(r64), 0.0, np.abs(g64 - r64))
        worst = max(worst, float(diff.max(initial=0.0)))
        ok = ok and bool(np.allclose(g64, r64, rtol=rtol, atol=atol, equal_nan=True))
    return worst, ok
