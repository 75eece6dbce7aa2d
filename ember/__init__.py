"""ember: a deep-learning compiler.

    import ember
    from ember import te
    f = ember.build(s, [A, B, C], target="c")
"""

from __future__ import annotations

from . import te, tir
from .errors import (
    ArgumentTypeError,
    ArtifactError,
    BuildError,
    CompileError,
    ConfigError,
    EmberError,
    LowerError,
    OutOfMemoryError,
    ScheduleError,
    ShapeError,
    TuneError,
)
from .kernel import build, lower
from .target import Target
from .version import __version__ as __version__


def compile(model, example_inputs=None, **options):
    """Compile a model: an ember Graph, a torch.nn.Module (traced with `example_inputs`), or an
    ONNX model (a path or a ModelProto). Returns a CompiledModel: `cm(*inputs)` runs it.
    Options: opt_level (0-3, default 2), disabled_passes, print_ir, name, num_threads, jobs,
    target ("c", "python": the loop-IR interpreter, or an ember.Target), cc, cflags, database
    (an ember.tune.Database: its best schedules are applied), checked (an integer division by
    zero raises ZeroDivisionError instead of giving 0 as numpy does), max_specializations (an
    ONNX model with runtime-valued inputs, such as axes given as a graph input, or with
    sequence or optional inputs, is a SpecializedModel that compiles per value or structure of
    those, for at most this many), cache ("module", the default: a torch module compiled before
    is found in the model cache by its key, without tracing; "trace": by torch.export's trace,
    for a forward that reads state its key cannot see, ember.frontend.module_key); see
    ember.compiler.compile_graph."""
    from .compiler import compile as _compile

    return _compile(model, example_inputs, **options)


def load(path, **options):
    """A compiled model saved with `CompiledModel.save(path)`, loaded without compiling anything.
    Loading runs the folder's native code (its library is dlopened): load only what you trust."""
    from .compiler import load as _load

    return _load(path, **options)


def quantize(model, example_inputs=None, calibration_data=None, **options):
    """A compiled model whose products run in int8: post-training static quantization calibrated on
    `calibration_data` (method="minmax" | "percentile" | "entropy", per_channel=True), or dynamic
    (dynamic=True: activation scales at run time, for linear layers); the other options are
    ember.compile's. See ember.quantization."""
    from .quantization import quantize as _quantize

    return _quantize(model, example_inputs, calibration_data, **options)


def bench(f, *args, **kwargs):
    """Time a kernel: warm-up, repeats, median (seconds in `.median`)."""
    from .runtime.bench import bench as _bench

    return _bench(f, *args, **kwargs)


__all__ = [
    "ArgumentTypeError", "ArtifactError", "BuildError", "CompileError", "ConfigError", "EmberError", "LowerError",
    "OutOfMemoryError", "ScheduleError", "ShapeError", "Target", "TuneError",
    "bench", "build", "compile", "load", "lower", "quantize", "te", "tir",
]


def __getattr__(name):
    """`ember.tune` is imported on first use (it brings the tuner's machinery)."""
    if name == "tune":
        import importlib

        return importlib.import_module(".tune", __name__)
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
