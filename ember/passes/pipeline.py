"""The pass pipeline: the Graph -> Graph passes, named by their files, composed per optimization
level, and run with instrumentation.

    graph = run_pipeline(graph, opt_level=2, disabled_passes=("cse",), print_ir="all", debug=True)

A `precision` other than "fp32" adds its passes (PRECISIONS: "bf16" stores the weights of linear
layers in bf16, ember.passes.bf16_weights; a backend may have its own, as the GPU's
GPU_PRECISIONS: "fp16" and "bf16" store every activation and weight in half precision,
ember.passes.half_precision) before pad_gemv, or at the end of a pipeline without it, and on
ember's CPU targets those that rewrite the blocked layout's operators (LAYOUT_PRECISIONS: "bf16"
its convolutions, ember.passes.bf16_convs) before the last dce, after the weights' conversions
are folded.

Per pass, `run_pipeline` records a PassReport (name, seconds, node counts before and after,
whether the graph changed) in `report` when given one; in debug mode (debug=True, or
EMBER_DEBUG=1 when debug is None) it runs the verifier (ember.graph.verify with
ember.ops.infer_types) on the input and after every pass, naming the pass at fault; it prints
the IR to stderr after the passes `print_ir` names ("all", a name or a list), headed
`# after <pass> (<n> -> <m> nodes, <t> ms)` or `# after <pass> (unchanged)`.
Every pass runs inside the regions of control-flow nodes first (innermost first: constant folding,
dead code and the rest inside each branch and loop body; ember.passes.rewrite.map_regions), then
on the graph that holds them. A pass that changes nothing hands on the graph it was given, so a
graph no pass changes comes back as the same object.

Options read (ember.config): debug (EMBER_DEBUG), print_ir (EMBER_PRINT_IR, used when print_ir
is None) and disable_passes (EMBER_DISABLE_PASSES, added to disabled_passes), both
comma-separated names.
Unknown pass names raise ConfigError (checked by ember.config) listing the known ones;
LATE_PASSES (fuse) are known names too, though the compiler, not this pipeline, runs them (and
asks `disabled_passes_of` and `printed_passes` whether to).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import config
from ..errors import ConfigError
from ..graph.core import Graph, GraphError
from ..graph.verify import verify
from ..ops.registry import infer_types
from ..target import Target
from .algebraic import simplify
from .bf16_convs import bf16_convs
from .bf16_weights import bf16_weights
from .channels_last import channels_last
from .conv_gemm import conv_gemm
from .cse import cse
from .dce import dce
from .flatten_products import flatten_products
from .fold_attention import fold_attention
from .fold_batch_norm import fold_batch_norm
from .fold_cache_append import fold_cache_append
from .fold_constants import fold_constants
from .fold_qkv_split import fold_qkv_split
from .fold_repeat_kv import fold_repeat_kv
from .fold_transposes import fold_transposes
from .fuse_siblings import fuse_siblings
from .gather_patches import gather_patches
from .half_precision import bf16_activations, fp16_activations
from .kv_cache import kv_cache
from .layout import layout
from .nbits_epilogues import nbits_epilogues
from .nest_concats import nest_concats
from .pack_weights import pack_weights
from .pad_gemv import pad_gemv
from .quantize_rows import quantize_rows
from .quantize_weights import WeightFormat, quantize_weights
from .rewrite import map_regions
from .slice_products import slice_products
from .split_k import split_k
from .split_reduce import split_reduce
from .split_taps import split_taps
from .tf32_products import tf32_products
from .trim_taps import trim_taps
from .unfold_attention import unfold_attention
from .winograd import winograd

Pass = Callable[[Graph], Graph]

PASSES: dict[str, Pass] = {p.__name__: p for p in (fold_constants, fold_attention, fold_repeat_kv, unfold_attention,
                                                   fold_transposes,
                                                   simplify, fold_cache_append, kv_cache, cse, slice_products,
                                                   fold_batch_norm, trim_taps, split_taps, nest_concats,
                                                   fuse_siblings, fold_qkv_split, flatten_products, quantize_weights,
                                                   quantize_rows, nbits_epilogues, bf16_weights, fp16_activations,
                                                   bf16_activations,
                                                   tf32_products, channels_last, conv_gemm, pad_gemv, split_k,
                                                   split_reduce, layout, pack_weights,
                                                   winograd, gather_patches, bf16_convs, dce)}

# passes that read the target (ember.target.Target; None: C on this machine): quantize_rows puts a
# prefill's weight-only products on VNNI where it has it, layout blocks channels by its SIMD width,
# pack_weights sizes its panels and pad_gemv its padding to its vectors. A backend names those it
# gives its target (Backend.graph_passes); ember's own give these. (CUDA's: unfold_attention,
# which changes nothing for the CPU's family.)
TARGET_PASSES = ("quantize_rows", "pad_gemv", "layout", "pack_weights", "bf16_convs")

# the passes a precision adds to a pipeline of level 2 or 3, before pad_gemv (on the 2-D gemms that
# flatten_products makes, before pack_weights puts fp32 weights in panels)
PRECISIONS: dict[str, tuple[str, ...]] = {"fp32": (), "bf16": ("bf16_weights",)}
# and those it adds before the last dce (on the blocked convolutions, their weights folded constants)
LAYOUT_PRECISIONS: dict[str, tuple[str, ...]] = {"fp32": (), "bf16": ("bf16_convs",)}
# a GPU's (Backend.precisions): activations and weights stored in half precision (products on
# Tensor Cores, convolutions as implicit GEMMs); tf32 changes no value's type, its products read
# their operands rounded to tf32; fp32's and tf32's convolutions are implicit GEMMs on CUDA cores
GPU_PRECISIONS: dict[str, tuple[str, ...]] = {"fp32": ("channels_last", "conv_gemm"),
                                              "tf32": ("tf32_products", "channels_last", "conv_gemm"),
                                              "fp16": ("fp16_activations", "channels_last", "conv_gemm"),
                                              "bf16": ("bf16_activations", "channels_last", "conv_gemm")}
# the passes that keep a graph's fp32 results (within reassociation): all but a lower precision's
FP32_PASSES = tuple(sorted(set(PASSES) - {p for table in (PRECISIONS, LAYOUT_PRECISIONS, GPU_PRECISIONS)
                                          for passes in table.values() for p in passes}))

# passes the compiler runs after the pipeline, named here so that they can be disabled like the
# others: fuse (ember.passes.fuse: Graph -> FusedGraph, at opt_level >= fuse.FUSE_LEVEL)
LATE_PASSES = ("fuse",)

# quantize_weights (ember.compile's weights= option, run_pipeline's `weights`) changes nothing
# without a format, nor kv_cache (kv_cache=, run_pipeline's `kv_cache`: the cache's dtype)
# without a dtype. The fold_constants after layout folds the weight conversions it inserts; level 3 is level 2 (the
# level for transformations that may change results beyond rounding, none so far)
_LEVEL_2 = ["fold_constants", "fold_attention", "fold_repeat_kv", "unfold_attention", "fold_transposes", "simplify",
            "fold_cache_append", "kv_cache", "cse", "slice_products",
            "fold_batch_norm", "trim_taps", "split_taps", "nest_concats", "fuse_siblings", "fold_qkv_split",
            "flatten_products", "quantize_weights",
            "quantize_rows", "nbits_epilogues",
            "pad_gemv", "split_k", "split_reduce", "layout", "pack_weights", "fold_constants", "winograd",
            "gather_patches", "dce"]
PIPELINES: dict[int, list[str]] = {0: [], 1: ["fold_constants", "dce"], 2: _LEVEL_2, 3: list(_LEVEL_2)}


@dataclass(frozen=True)
class PassReport:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int
    changed: bool

    def __str__(self):
        what = f"{self.nodes_before} -> {self.nodes_after} nodes" if self.changed else "unchanged"
        return f"{self.name}: {what}, {self.seconds * 1e3:.1f} ms"


def run_pipeline(graph: Graph, opt_level: int = 2, *, disabled_passes: Iterable[str] = (), target: Target | None = None,
                 print_ir: str | Iterable[str] | None = None, debug: bool | None = None,
                 report: list[PassReport] | None = None, precision: str = "fp32",
                 weights: WeightFormat | None = None, kv_cache: str | None = None) -> Graph:
    if opt_level not in PIPELINES:
        raise ConfigError(f"opt_level must be one of {sorted(PIPELINES)}, got {opt_level!r}")
    names = pipeline_of(opt_level, precision, target)
    disabled = disabled_passes_of(disabled_passes)
    printed = printed_passes(print_ir)
    debug = config.get("debug") if debug is None else debug
    if debug:
        _verify(graph, "the pipeline's input")
    target_passes = TARGET_PASSES if target is None else target.backend.graph_passes
    disabled |= set(target.backend.skipped_passes) if target is not None else set()
    for name in names:
        if name in disabled:
            continue
        before = _signature(graph)
        start = time.perf_counter()
        p = functools.partial(quantize_weights, fmt=weights) if name == "quantize_weights" else \
            functools.partial(PASSES[name], dtype=kv_cache) if name == "kv_cache" else PASSES[name]
        out = _everywhere(p, name in target_passes, target)(graph)
        seconds = time.perf_counter() - start
        if debug:
            _verify(out, f"pass {name}")
        entry = PassReport(name, seconds, len(graph.nodes), len(out.nodes), _signature(out) != before)
        if report is not None:
            report.append(entry)
        if name in printed:
            what = f"{entry.nodes_before} -> {entry.nodes_after} nodes, {seconds * 1e3:.1f} ms" if entry.changed \
                else "unchanged"
            print(f"# after {name} ({what})\n{out}", file=sys.stderr)
        if entry.changed:
            graph = out  # else the graph itself goes on: unchanged means the same object
    return graph


def pipeline_of(opt_level: int, precision: str = "fp32", target: Target | None = None) -> list[str]:
    """The passes of `opt_level` with those of `precision`: the target's (Backend.precisions) or
    PRECISIONS' before pad_gemv, and with PRECISIONS, LAYOUT_PRECISIONS' before the last dce."""
    own = target is not None and target.backend.precisions is not None
    table = target.backend.precisions if own else PRECISIONS
    if precision not in table:
        where = "" if target is None else f" for target {target.kind!r}"
        raise ConfigError(f"precision must be one of {sorted(table)}{where}, got {precision!r}")
    names = PIPELINES[opt_level]
    at = names.index("pad_gemv") if "pad_gemv" in names else len(names)
    names = [*names[:at], *table[precision], *names[at:]]
    if own:
        return names
    last = len(names) - names[::-1].index("dce") - 1 if "dce" in names else len(names)
    return [*names[:last], *LAYOUT_PRECISIONS[precision], *names[last:]]


def printed_passes(print_ir: str | Iterable[str] | None = None) -> set[str]:
    """The passes to print the IR after: those named ("all": every one), else EMBER_PRINT_IR's."""
    return set(config.resolve("print_ir", print_ir))


def disabled_passes_of(disabled_passes: Iterable[str] = ()) -> set[str]:
    """The passes to skip: those named, and those of EMBER_DISABLE_PASSES."""
    return set(config.resolve("disable_passes", disabled_passes, "disabled_passes")) | set(
        config.get("disable_passes"))


def _everywhere(p, reads_target: bool, target: Target | None) -> Pass:
    """The pass applied inside every region (innermost first), then to the graph."""
    def run(graph: Graph) -> Graph:
        graph = map_regions(graph, run)
        return p(graph, target) if reads_target else p(graph)
    return run


def _verify(graph: Graph, after: str) -> None:
    try:
        verify(graph, infer_types)
    except GraphError as e:
        raise GraphError(f"after {after}: {e}") from e


def _signature(graph: Graph) -> tuple:
    """What a pass can change: the nodes (operator, inputs, attributes, outputs), the constants
    and the outputs, by name, and the inputs' types (ember.passes.kv_cache's)."""
    return (tuple((n.op, tuple(v.name for v in n.inputs), n.attrs, tuple(v.name for v in n.outputs),
                   tuple(_signature(r) for r in n.regions)) for n in graph.nodes),
            tuple(graph.constants), tuple(v.name for v in graph.outputs), tuple(v.type for v in graph.inputs))
