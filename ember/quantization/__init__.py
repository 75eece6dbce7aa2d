"""Post-training int8 quantization: `ember.quantize(model, example_inputs, calibration_data)`.

The model is imported and optimized as ember.compile does (batch norms folded into
convolutions, linear layers flattened to 2-D gemms), up to the passes that lay weights out for
the target. Static quantization (the default) then compiles that float graph once more with the
activations that products read as its outputs, runs it on the calibration batches (progress on
stderr) and gives each activation a range (calibrate.py: "minmax", "percentile" or "entropy");
dynamic quantization (`dynamic=True`, for linear layers: transformers) skips calibration and
takes each activation's range at run time (a linear layer's input a row at a time, rewrite.py).
The products are rewritten onto ember's int8 kernel
(rewrite.py: symmetric int8 weights, per output channel unless per_channel=False, asymmetric
uint8 activations) and the graph is compiled with the remaining options of ember.compile: the
result is a CompiledModel like any other (it saves and loads as one), for target "c" or "python"
(the int8 kernels are the CPU's), with the sizes' ranges of torch.export's `dynamic_shapes`
checked at each call. A calibration batch whose watched values hold a NaN or an infinity is
refused (ConfigError naming the batch and the value): no range is read from them. With `offload=vta` (an int8
accelerator of ember.accel) the int8 products run on that device's simulator and the rest on the
CPU (offload.py): the result is a SegmentedModel, bit-exact against the CPU's, and
`device_reports(model)` gives each product's cycles, DMA bytes and GEMM-core utilization.

`weights="int8" | "int4"` (with group_size, zero_points, kv_cache, dynamic_shapes: ember.compile's options)
is weight-only quantization instead, a language model's decode: the same as ember.compile with
those options (ember.passes.quantize_weights), nothing to calibrate.

`error(out, ref)` gives the measures a quantized model is reported by: the relative error
||out - ref|| / ||ref|| and the agreement of the top-1 class (argmax over the last axis).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import numpy as np

from ..compiler import check_option_names, compile_graph
from ..compiler import compile as compile_model
from ..errors import ArgumentTypeError, ConfigError
from ..frontend import import_model
from ..passes.pipeline import TARGET_PASSES, run_pipeline
from ..passes.rewrite import Rewriter
from ..target import as_target
from .calibrate import METHODS, Observer
from .offload import check_accelerator, device_reports
from .offload import offload as offload_products
from .requant import fold_requantization
from .rewrite import products, quantize_products

__all__ = ["device_reports", "error", "quantize"]


def quantize(model, example_inputs=None, calibration_data: Iterable | None = None, *, method: str = "minmax",
             per_channel: bool = True, dynamic: bool = False, percentile: float | None = None,
             progress: bool = True, nhwc: bool | None = None, offload=None, offload_tiles=None, dynamic_shapes=None,
             **compile_options):
    """A compiled model of `model` (a torch.nn.Module with `example_inputs`, an ONNX model, a
    Graph) whose products with constant weights run in int8 (see the module doc).
    calibration_data: batches (each a tuple of the model's inputs, or one input), for static
    quantization; method: how a range is read from them; percentile: for method="percentile"
    (default 99.99). dynamic=True reads no range, so it takes no method.
    nhwc: (default True) convolutions chained in NHWC uint8 rows, each requantizing in its
    kernel's epilogue for the next (rewrite.py); False: each convolution's float32 output back in
    NCHW, its epilogue in the operators after it (what offload does, so that a product's epilogue
    can run on the host).
    offload: an int8 accelerator (ember.accel.vta) to run the int8 products on (see the module doc);
    offload_tiles: the device tiles of some of its GEMM shapes (ember.quantization.offload.offload).
    An option that means nothing with the others (percentile without method="percentile", a method
    with dynamic=True, offload_tiles without offload, nhwc with offload, which lays convolutions
    out as it needs, or with weights=) is an ArgumentTypeError, never dropped.
    dynamic_shapes: torch.export's, for a torch.nn.Module (as ember.compile's).
    compile_options: those of ember.compile (target, opt_level, num_threads, ...); weights=
    "int8" | "int4": weight-only quantization, ember.compile's."""
    check_option_names(compile_options, "ember.quantize", ("method", "per_channel", "dynamic", "percentile", "progress",
                                                           "nhwc", "offload", "offload_tiles", "dynamic_shapes"))
    for name, value in (("per_channel", per_channel), ("dynamic", dynamic), ("progress", progress), ("nhwc", nhwc)):
        if not isinstance(value, bool | np.bool_) and not (name == "nhwc" and value is None):
            raise ArgumentTypeError(f"ember.quantize: {name} must be True or False, got {value!r}")
    if offload_tiles is not None and offload is None:
        raise ArgumentTypeError("ember.quantize: offload_tiles are tiles of an accelerator's GEMM shapes: they need "
                                "offload= (the accelerator, ember.accel.vta) too")
    if nhwc is not None and offload is not None:
        raise ArgumentTypeError(f"ember.quantize: nhwc={nhwc!r} with offload: an offloaded model's convolutions keep "
                                "NCHW (their epilogues on the host); drop nhwc")
    if percentile is not None and method != "percentile":
        raise ArgumentTypeError(f"ember.quantize: percentile is for method='percentile', got method={method!r}")
    if compile_options.get("weights") not in (None, "float32"):
        if calibration_data is not None or dynamic or offload is not None or method != "minmax" or not per_channel \
                or nhwc is not None:
            raise ArgumentTypeError("ember.quantize: weights= quantizes the weights only (float32 activations): "
                                    "it takes no calibration_data, dynamic, method, per_channel, nhwc or offload")
        return compile_model(model, example_inputs, dynamic_shapes=dynamic_shapes, **compile_options)
    if method not in METHODS:
        raise ArgumentTypeError(f"ember.quantize: method must be one of {METHODS}, got {method!r}")
    percentile = 99.99 if percentile is None else percentile
    if isinstance(percentile, bool) or not isinstance(percentile, int | float) or not 50 < percentile <= 100:
        raise ConfigError(f"ember.quantize: percentile must be a number in (50, 100] (the share of values a range "
                          f"holds on each side), got {percentile!r}")
    if dynamic and method != "minmax":
        raise ArgumentTypeError(f"ember.quantize: dynamic=True takes the activations' ranges at run time (their "
                                f"min and max); it takes no method, got method={method!r}")
    if dynamic and calibration_data is not None:
        raise ArgumentTypeError("ember.quantize: dynamic=True takes the activations' ranges at run time; it takes "
                                "no calibration_data")
    if not dynamic and calibration_data is None:
        raise ArgumentTypeError("ember.quantize: static quantization needs calibration_data (batches of inputs); "
                                "dynamic=True takes the activations' ranges at run time instead")
    if not dynamic and (hasattr(calibration_data, "shape") or not isinstance(calibration_data, Iterable)):
        raise ArgumentTypeError(f"ember.quantize: calibration_data is an iterable of batches (a list, a generator), "
                                f"got {type(calibration_data).__name__}; one batch x is [x]")
    target = as_target(compile_options.get("target", "c"))
    if target.kind not in ("c", "python"):
        raise ConfigError(f"ember.quantize: target {target.kind!r} has no int8 product kernels yet (they are the "
                          "CPU's): quantize for target 'c' or 'python'")
    if offload is not None:
        check_accelerator(offload)
    imported = import_model(model, example_inputs, caller="ember.quantize", dynamic_shapes=dynamic_shapes)
    opt_level = compile_options.get("opt_level", 2)
    graph = run_pipeline(imported, opt_level, disabled_passes=TARGET_PASSES)
    ranges = None
    if not dynamic:
        observers = _calibrate(graph, calibration_data, progress, compile_options)
        ranges = {name: o.range(method, percentile) for name, o in observers.items()}
    quantized = quantize_products(graph, ranges, per_channel, nhwc=nhwc is not False and offload is None)
    if offload is None:  # (an offloaded product's epilogue stays the host's)
        quantized = fold_requantization(quantized)
    quantized.ranges.update(imported.ranges)  # (the sizes' ranges, checked at each call, as ember.compile's)
    host = offload_products(quantized, offload, offload_tiles) if offload is not None else None
    return compile_graph(quantized, host=host, **compile_options)


def _calibrate(graph, batches: Iterable, progress: bool, options: dict) -> dict[str, Observer]:
    """An Observer per activation a product reads, fed by every batch."""
    watched = list(dict.fromkeys(n.inputs[0] for n in products(graph)))
    if not watched:
        return {}
    inputs = {v: k for k, v in enumerate(graph.inputs)}
    computed = [v for v in watched if v not in inputs]
    probe = compile_graph(_with_outputs(graph, computed), **options) if computed else None
    observers = {v.name: Observer(seed=k) for k, v in enumerate(watched)}
    batches = list(batches) if not hasattr(batches, "__len__") else batches
    total = len(batches)
    if total == 0:
        raise ArgumentTypeError("ember.quantize: calibration_data holds no batch")
    for k, batch in enumerate(batches):
        arrays = _batch(batch, graph.inputs, k)
        for v in watched:  # (an input's NaN named before what it makes of the values after it)
            if v in inputs:
                observers[v.name].update(_finite(arrays[inputs[v]], v.name, k))
        outs = probe(*arrays) if probe is not None else ()
        outs = outs if isinstance(outs, tuple | list) else (outs,)
        for v, out in zip(computed, outs):
            observers[v.name].update(_finite(_array(out), v.name, k))
        if progress:
            print(f"\rember.quantize: calibrating, batch {k + 1}/{total}", end="" if k + 1 < total else "\n",
                  file=sys.stderr, flush=True)
    return observers


def _batch(batch, inputs, k: int) -> list[np.ndarray]:
    """Calibration batch k as arrays, one per graph input of its dtype (a DataLoader's (x, label)
    pairs, a dict or float64 data named here, not as a call's error or not at all where the
    batch's arrays feed the observers directly)."""
    arrays = [_array(x) for x in (batch if isinstance(batch, tuple | list) else (batch,))]
    names = ", ".join(v.name for v in inputs)
    if len(arrays) != len(inputs):
        raise ArgumentTypeError(f"ember.quantize: calibration batch {k} holds {len(arrays)} array(s); the model takes "
                                f"{len(inputs)} input(s) ({names}): a batch is a tuple of them, or the one input")
    for a, v in zip(arrays, inputs):
        if str(a.dtype) != v.type.dtype:
            raise ArgumentTypeError(f"ember.quantize: calibration batch {k}: input {v.name!r} has dtype {a.dtype}, "
                                    f"expected {v.type.dtype}")
    return arrays


def _finite(x: np.ndarray, name: str, batch: int) -> np.ndarray:
    """x, refused where it holds a NaN or an infinity: a range over them is no range (NaN fell out
    of the minimum and maximum, an infinity made every step infinite), and a model calibrated on
    them quantizes everything to one code."""
    bad = ~np.isfinite(x)
    if bad.any():
        raise ConfigError(f"ember.quantize: calibration batch {batch}: {name!r} holds {int(bad.sum())} NaN or "
                          f"infinite value(s) of {x.size}; calibrate on batches whose activations are finite")
    return x


def _with_outputs(graph, values):
    """The graph with `values` as its outputs (what reads nothing of them is dropped later)."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        rw.copy(node, rw.inputs(node))
    rw.new.set_outputs([rw.value(v) for v in values])
    return rw.new


def _array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def error(out, ref) -> tuple[float, float]:
    """(||out - ref|| / ||ref||, the share of rows whose argmax over the last axis agrees)."""
    out, ref = (_array(x).astype(np.float64) for x in (out, ref))
    rel = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))
    top1 = float(np.mean(out.reshape(-1, out.shape[-1]).argmax(-1) == ref.reshape(-1, ref.shape[-1]).argmax(-1)))
    return rel, top1
