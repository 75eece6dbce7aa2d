"""Every option of ember, declared once: name, default, environment variable, description, and
the kind of value it takes, which says what is allowed and checks it.

    config.get("cc")                            # EMBER_CC when set, else the default; checked
    config.resolve("cflags", cflags, "cflags")  # a keyword's value (None: the option), checked
    config.threads(num_threads)                 # the OpenMP thread count native code may be given

Where a value is read it is checked: a value ember cannot use raises ConfigError naming the
variable (or the keyword), the value and what is allowed, before anything is compiled or run.
An empty or all-blank variable counts as unset, so EMBER_CACHE_DIR="" is the default cache,
never the current directory. Booleans are 1/true/yes/on or 0/false/no/off, in any case.

Threads: more than max_threads() (THREADS_PER_CORE x os.cpu_count(), at most MAX_THREADS) is
lowered to it with a RuntimeWarning naming the variable. libgomp starts a team with a 128-byte
alloca per thread on the caller's stack (100000 threads: 12.8 MB, past an 8 MB stack: SIGSEGV)
and ends the process when it cannot create a thread; compute kernels gain nothing past a few
threads per core. OMP_NUM_THREADS, which libgomp reads itself, is held to the same bound.

C flags that change floating-point results (FAST_MATH_FLAGS: -ffast-math, -Ofast and their
parts) are refused: they silently change NaN propagation, argmax over NaN, and tanh and sigmoid
at large inputs. -fno-math-errno and -fno-trapping-math are allowed: no value changes (ember
reads neither errno nor floating-point traps).

Options that change generated code (cc, cflags) are part of the build cache key. `describe()`
lists every option with its value (`ember doctor` prints it).
"""

from __future__ import annotations

import functools
import numbers
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from .errors import ConfigError

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
THREADS_PER_CORE = 4
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
MAX_THREADS = 1024  # libgomp's per-team alloca: 128 KiB, well inside a default (8 MiB) thread stack

# flags that change floating-point results, and what each does
FAST_MATH_FLAGS = {
    "-ffast-math": "assumes no NaN, infinity or signed zero; reorders and approximates",
    "-Ofast": "-O3 with -ffast-math",
    "-ffinite-math-only": "assumes no NaN or infinity",
    "-fno-honor-nans": "assumes no NaN",
    "-fno-honor-infinities": "assumes no infinity",
    "-funsafe-math-optimizations": "reassociates and approximates",
    "-fassociative-math": "reorders sums and products",
    "-freciprocal-math": "x / y as x * (1 / y)",
    "-fno-signed-zeros": "ignores the sign of zero",
    "-fcx-limited-range": "complex division without range reduction",
    "-fapprox-func": "approximates math functions",
    "-fsingle-precision-constant": "double constants as float",
    "-mdaz-ftz": "flushes subnormals to zero in the whole process",
    "-ffp-model=fast": "-ffast-math",
    "-ffp-model=aggressive": "-ffast-math",
}


def max_threads() -> int:
    """The most OpenMP threads ember hands native code on this machine."""
    return min(MAX_THREADS, THREADS_PER_CORE * (os.cpu_count() or 1))


# -- kinds of value: parse(text, where) reads a variable, check(value, where) a keyword (for the
# options that have one); both return the value or raise ValueError with the reason ---------------
@dataclass(frozen=True)
class Threads:
    """A thread count: an integer >= 0; more than max_threads() is lowered to it, with a warning."""

    @property
    def allowed(self) -> str:
        return (f"an integer >= 0 (0: OpenMP's default); above {max_threads()} ({THREADS_PER_CORE} per core, "
                f"at most {MAX_THREADS}) it is lowered to {max_threads()}")

    def parse(self, text: str, where: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError("not an integer")
        return self.check(int(text), where)

    def check(self, value, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"not an integer (a {type(value).__name__})")
        if value < 0:
            raise ValueError("negative")
        if value > max_threads():
            _warn(f"{where}={value}: more threads than this machine can run; using {max_threads()} "
                  f"({THREADS_PER_CORE} per core, at most {MAX_THREADS})")
            return max_threads()
        return int(value)


@dataclass(frozen=True)
class Count:
    """A number of things ember keeps: an integer >= 1."""

    allowed = "an integer >= 1"

    def parse(self, text: str, where: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError("not an integer")
        return self.check(int(text), where)

    def check(self, value, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"not an integer (a {type(value).__name__})")
        if value < 1:
            raise ValueError("less than 1")
        return int(value)


@dataclass(frozen=True)
class Size:
    """A number of bytes, with an optional unit: K, M, G or T, powers of 1024 (2G is 2 GiB; "KiB",
    "GB" and such are read the same), a fraction allowed (1.5G)."""

    allowed = "a size in bytes >= 0, with an optional unit K, M, G or T (powers of 1024: 2G is 2 GiB)"

    def parse(self, text: str, where: str) -> int:
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?)(?:i?b)?", text.lower())
        if m is None:
            raise ValueError("not a size")
        return int(Decimal(m[1]) * 1024 ** " kmgt".index(m[2] or " "))  # (exact at any length)


@dataclass(frozen=True)
class Boolean:
    allowed = f"one of {', '.join(TRUE)} (on) or {', '.join(FALSE)} (off), in any case"

    def parse(self, text: str, where: str) -> bool:
        word = text.lower()
        if word not in TRUE + FALSE:
            raise ValueError("not a boolean")
        return word in TRUE


@dataclass(frozen=True)
class Command:
    """A program and its leading arguments, split like a shell would ('ccache gcc')."""

    allowed = "a C compiler command, split like a shell would (quote a path with spaces)"

    def parse(self, text: str, where: str) -> str:
        if not _words(text):
            raise ValueError("names no program")
        return text

    def check(self, value, where: str) -> str:
        if not isinstance(value, str):
            raise ValueError(f"not a string (a {type(value).__name__})")
        return self.parse(value, where)


@dataclass(frozen=True)
class Flags:
    """Compiler flags, split like a shell would; a keyword may also give a list of flags."""

    allowed = ("C compiler flags, split like a shell would, none of which changes floating-point results "
               "(-ffast-math, -Ofast and their parts: ember.config.FAST_MATH_FLAGS)")

    def parse(self, text: str, where: str) -> str:
        self._refuse_fast_math(_words(text))
        return text

    def check(self, value, where: str) -> str:
        if isinstance(value, str):
            return self.parse(value, where)
        flags = _strings(value)
        self._refuse_fast_math(flags)
        return shlex.join(flags)

    @staticmethod
    def _refuse_fast_math(flags: list[str]) -> None:
        unsafe = [f for f in flags if f in FAST_MATH_FLAGS]
        if unsafe:
            what = "; ".join(f"{f}: {FAST_MATH_FLAGS[f]}" for f in unsafe)
            raise ValueError(f"{', '.join(unsafe)} change(s) floating-point results ({what}): NaN propagation, "
                             f"argmax over NaN, tanh and sigmoid at large inputs would silently differ; remove it")


@dataclass(frozen=True)
class Folder:
    """A folder ember creates when needed (~ expanded, made absolute where it is read)."""

    allowed = "a folder path (an empty value: the default)"

    def parse(self, text: str, where: str) -> str:
        if "\0" in text:
            raise ValueError("contains a NUL character")
        expanded = os.path.expanduser(text)
        if expanded.startswith("~"):
            raise ValueError(f"no home folder for {text.split(os.sep)[0]}")
        path = Path(expanded).absolute()
        try:
            for p in (path, *path.parents):  # the nearest existing part must be a folder
                if p.exists():
                    if not p.is_dir():
                        raise ValueError(f"{p} is not a folder")
                    break
        except OSError as e:  # a name too long, a loop of links
            raise ValueError(f"cannot be looked up ({e.strerror})") from e
        return str(path)


@dataclass(frozen=True)
class PassNames:
    """Graph pass names, comma-separated (a keyword may give a list); with `everything`, "all"."""

    everything: bool = False

    @property
    def allowed(self) -> str:
        return f"{'all, or ' if self.everything else ''}comma-separated names from: {', '.join(_pass_names())}"

    def parse(self, text: str, where: str) -> tuple[str, ...]:
        if self.everything and text == "all":
            return _pass_names()
        return self._known(text.split(","))

    def check(self, value, where: str) -> tuple[str, ...]:
        if isinstance(value, str):
            return self.parse(value.strip(), where) if value.strip() else ()
        return self._known(_strings(value))

    @staticmethod
    def _known(names: list[str]) -> tuple[str, ...]:
        names = [n.strip() for n in names if n.strip()]
        unknown = sorted(set(names) - set(_pass_names()))
        if unknown:
            raise ValueError(f"unknown pass(es) {unknown}")
        return tuple(dict.fromkeys(names))


# the graph passes by name, as EMBER_PRINT_IR and EMBER_DISABLE_PASSES name them, in the order
# ember.passes.pipeline runs them (fuse last, run by the compiler); a test keeps the two equal, so
# that this ground-layer module need not import the passes
GRAPH_PASSES = ("fold_constants", "fold_attention", "fold_repeat_kv", "unfold_attention", "fold_transposes", "simplify",
                "fold_cache_append", "kv_cache", "cse",
                "slice_products", "fold_batch_norm", "trim_taps", "split_taps", "nest_concats", "fuse_siblings",
                "fold_qkv_split", "flatten_products",
                "quantize_weights", "quantize_rows", "nbits_epilogues", "bf16_weights", "fp16_activations",
                "bf16_activations",
                "tf32_products", "channels_last", "conv_gemm", "pad_gemv", "split_k", "split_reduce",
                "layout", "pack_weights", "winograd", "gather_patches", "bf16_convs", "dce", "fuse")


def _pass_names() -> tuple[str, ...]:
    """GRAPH_PASSES, with the passes added to the pipeline at run time once it is imported (a
    pass a user or a test plants): the pipeline's own table, read without importing it."""
    pipeline = sys.modules.get("ember.passes.pipeline")
    return GRAPH_PASSES if pipeline is None else (*pipeline.PASSES, *pipeline.LATE_PASSES)


def _strings(value) -> list[str]:
    """A keyword's list (or other iterable) of strings."""
    items = list(value) if isinstance(value, Iterable) else None
    if items is None or not all(isinstance(x, str) for x in items):
        raise ValueError("neither a string nor a list of strings")
    return items


def _words(text: str) -> list[str]:
    return list(_split(text))


@functools.lru_cache(maxsize=64)
def _split(text: str) -> tuple[str, ...]:
    """shlex's words of `text`, kept per text: the flags are read on every kernel launch (ember.triton),
    and shlex takes about half a millisecond."""
    if "\0" in text:
        raise ValueError("contains a NUL character")
    try:
        return tuple(shlex.split(text))
    except ValueError as e:  # an unclosed quote, a trailing backslash
        raise ValueError(f"cannot be split into words ({e})") from e


# -- the options ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    name: str
    default: object  # a callable: computed when read
    env: str
    description: str
    kind: Threads | Count | Size | Boolean | Command | Flags | Folder | PassNames

    def default_value(self):
        return self.default() if callable(self.default) else self.default


def _default_cache_dir() -> str:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: relative paths are ignored
    return str(base / "ember")


OPTIONS = {
    o.name: o
    for o in [
        Option("cache_dir", _default_cache_dir, "EMBER_CACHE_DIR",
               "where compiled kernels are cached (default $XDG_CACHE_HOME/ember or ~/.cache/ember)", Folder()),
        Option("cache_limit", 8 << 30, "EMBER_CACHE_LIMIT",
               "the bytes the cache folder keeps at most, split among its caches (ember.runtime.disk_cache."
               "SHARES: half for whole models); the least recently used entries are removed first", Size()),
        Option("cc", "cc", "EMBER_CC", "the C compiler", Command()),
        # -fno-tree-loop-if-convert: GCC 12 at -O3 with AVX-512 miscompiles guarded loops that it
        # if-converts and vectorizes with masks (tests/te: test_rowsum_rfactor_empty_ranges);
        # ember vectorizes explicitly, so little is lost
        Option("cflags", "-O3 -march=native -fno-tree-loop-if-convert -fopenmp -shared -fPIC -std=gnu11",
               "EMBER_CFLAGS", "flags passed to the C compiler (replace the default ones)", Flags()),
        Option("num_threads", 0, "EMBER_NUM_THREADS", "OpenMP threads per kernel call (0: OpenMP's default)",
               Threads()),
        Option("debug", False, "EMBER_DEBUG",
               "verify the graph after every graph pass and the loop IR after every lowering pass, naming "
               "the pass at fault (slower compiles)", Boolean()),
        Option("print_lower", False, "EMBER_PRINT_LOWER", "print the loop IR after every lowering pass", Boolean()),
        Option("print_ir", (), "EMBER_PRINT_IR",
               "graph passes after which to print the graph to stderr: comma-separated names, or all",
               PassNames(everything=True)),
        Option("disable_passes", (), "EMBER_DISABLE_PASSES", "graph passes to skip: comma-separated names",
               PassNames()),
        Option("checked", False, "EMBER_CHECKED", "integer division by zero raises ZeroDivisionError (else 0)",
               Boolean()),
        Option("interpret", False, "EMBER_INTERPRET",
               "run ember.triton kernels in the NumPy interpreter, program by program, instead of compiling "
               "them (TRITON_INTERPRET is read too)", Boolean()),
        Option("triton_debug", False, "EMBER_TRITON_DEBUG",
               "compiled ember.triton kernels check every load and store against its argument's bounds and "
               "raise instead of corrupting memory (TRITON_DEBUG and EMBER_DEBUG turn it on too)", Boolean()),
        Option("tile_mma", True, "EMBER_TILE_MMA",
               "ember.triton on the GPU: a tl.dot of fp16/bf16 blocks copied from 16-byte aligned rows runs on "
               "mma.sync through ldmatrix from swizzled shared tiles (0: wmma from padded ones, the fallback "
               "where a GPU finds mma wrong)", Boolean()),
        Option("tile_fragment_stores", True, "EMBER_TILE_FRAGMENT_STORES",
               "ember.triton on the GPU: a tl.dot's accumulator in mma.sync's fragments is stored to its tensor "
               "by the lanes that hold it, converted to the tensor's type, two columns a store (0: through a "
               "float block in shared memory, as before)", Boolean()),
        Option("lowered_cache", True, "EMBER_LOWERED_CACHE",
               "keep lowered kernels in the cache folder (cache_dir/lowered), so that another process compiling "
               "the same operators lowers nothing again", Boolean()),
        Option("model_cache", True, "EMBER_MODEL_CACHE",
               "keep compiled torch modules whole in the cache folder (cache_dir/models), keyed by the traced "
               "program, its weights, the options and the target, so that compiling one again in another "
               "process loads it", Boolean()),
        Option("record_trace", True, "EMBER_RECORD_TRACE",
               "trace a torch module of static shapes by one eager run of its forward (ember.frontend.torch."
               "record; torch.export's first call in a process imports Dynamo: 1.1 s of CPU); off: always "
               "torch.export", Boolean()),
        Option("keep_source", True, "EMBER_KEEP_SOURCE", "keep the generated C next to the cached library",
               Boolean()),
        Option("fast_call", True, "EMBER_FAST_CALL",
               "check a model's arguments and call it through ember's compiled call extension (built once per "
               "cache; off, or where it cannot be built: the Python call path, same checks and errors)", Boolean()),
        Option("cuda_graphs", True, "EMBER_CUDA_GRAPHS",
               "a model on the GPU (target 'cuda') replays its launches as one CUDA graph per call from its second "
               "call (off: every kernel launched from Python, as its first call does)", Boolean()),
        Option("max_specializations", 8, "EMBER_MAX_SPECIALIZATIONS",
               "the most values of a model's runtime-valued inputs (ONNX axes, k, pads, scales given as graph "
               "inputs), or structures of its ONNX sequence and optional inputs, compiled for, one specialization "
               "each, per compiled model", Count()),
    ]
}


def get(name: str):
    """The option's value: its variable's, checked, when set and not blank; else the default."""
    opt = OPTIONS[name]
    raw = os.environ.get(opt.env, "")
    if not raw.strip():
        return opt.default_value()
    return _checked(opt.kind.parse, raw.strip(), opt.env, "", opt)


def resolve(name: str, value, keyword: str | None = None):
    """A keyword argument's value for the option, checked and named by `keyword` (default: the
    option's name) in errors; None means the option's own value (`get`)."""
    if value is None:
        return get(name)
    opt = OPTIONS[name]
    return _checked(opt.kind.check, value, keyword or name, " (keyword argument)", opt)


def threads(value: int | None = None, keyword: str = "num_threads") -> int:
    """The OpenMP thread count to hand native code: `value` (a keyword's; None: the num_threads
    option), checked and at most max_threads(); when it is 0 (OpenMP's default) and OMP_NUM_THREADS
    asks for more than max_threads(), max_threads(), since libgomp reads that variable unchecked."""
    n = resolve("num_threads", value, keyword)
    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if n == 0 and re.fullmatch(r"[0-9]+", omp) and int(omp) > max_threads():
        _warn(f"OMP_NUM_THREADS={omp}: more threads than this machine can run; ember's kernels use "
              f"{max_threads()} ({THREADS_PER_CORE} per core, at most {MAX_THREADS})")
        return max_threads()
    return n


class ThreadCount:
    """A `num_threads` attribute whose assignment goes through `threads` (checked, bounded); the
    value is kept in `_num_threads`, which the native call paths read directly."""

    def __get__(self, obj, owner=None):
        return self if obj is None else obj._num_threads

    def __set__(self, obj, n: int | None):
        obj._num_threads = threads(n)


def describe() -> list[tuple[bool, str]]:
    """Per option: whether its value is usable, and a line with the variable, the value (or
    what is wrong with it) and the description."""
    lines = []
    for opt in OPTIONS.values():
        try:
            value = get(opt.name)
        except ConfigError as e:
            lines.append((False, f"ERROR {e}"))
            continue
        origin = "set" if os.environ.get(opt.env, "").strip() else "default"
        lines.append((True, f"{opt.env}={value!r} ({origin}): {opt.description}"))
    return lines


def _warn(message: str) -> None:
    """A RuntimeWarning shown at the first caller outside ember (the user's line): once per line
    under Python's default filters, however often ember reads the option."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def _checked(check: Callable, value, where: str, what: str, opt: Option):
    """`check(value, where)`, its ValueError raised as a ConfigError naming `where` (the variable
    or the keyword), the value and what is allowed."""
    try:
        return check(value, where)
    except ValueError as e:
        raise ConfigError(f"{where}={value!r}{what}: {e}; allowed: {opt.kind.allowed}") from None
