"""The target: where a model's kernels run, and everything about it that shapes their code.

    ember.compile(model, target="c")        # C with OpenMP and SIMD, built by the configured compiler
    ember.compile(model, target="python")   # the loop-IR interpreter: slow, exact, no compiler
    ember.build(s, [A, B], target="cuda")   # one GPU kernel: CUDA C through NVRTC (ember.cuda)
    ember.compile(model, target=Target("c", cc="clang", cflags="-O2 -fopenmp -shared -fPIC"))

A `Target` holds its kind (the name of its backend, `target.backend`: ember.backends; "cuda"
builds single kernels for now), the C compiler and flags, the SIMD width kernels are vectorized
for (and the layout pass blocks channels by), the alignment of every buffer (ALIGN), the
default-schedule family, and the key the tuning database files schedules under (`key`).
`as_target` turns "c", "python", "cuda" or a Target into a Target; the
compiler, `ember.build`, the tuner and the runtime take it from there.

The SIMD width of a C target is read once from the compiler's own predefined macros under its
flags (`cc -march=native -dM -E`), so it agrees with what `-march=native` will generate.
"""

from __future__ import annotations

import functools
import platform
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import backends, config
from .errors import ConfigError

ALIGN = 64  # bytes every buffer starts at: one cache line, one AVX-512 register
KINDS = ("c", "python", "cuda")

_WIDTHS = (("__AVX512F__", 64), ("__AVX__", 32), ("__SSE2__", 16), ("__ARM_NEON", 16))


@functools.cache
def _macros(cc: str, cflags: str) -> str:
    flags = [f for f in shlex.split(cflags) if f.startswith(("-m", "-march", "-mcpu"))]
    try:
        return subprocess.run([*shlex.split(cc), *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _vector_bytes(cc: str, cflags: str) -> int:
    """Bytes in one SIMD register, as the compiler and flags target it."""
    macros = _macros(cc, cflags)
    return next((width for macro, width in _WIDTHS if f"#define {macro} " in macros), 16)


_SIMD_MACRO = re.compile(r"^#define __((?:SSE[2-4]\w*|SSSE3|AVX\w*|FMA4?|F16C|AMX\w*)__|ARM_NEON|"
                         r"ARM_FEATURE_(?:SVE\w*|FMA|DOTPROD|MATMUL_INT8|BF16\w*|FP16\w*)) ", re.M)


@dataclass(frozen=True)
class Target:
    """Where kernels run (see the module doc). For kind "c", cc and cflags default to the options
    (EMBER_CC, EMBER_CFLAGS) and vector_bytes to what they target; "python" has no compiler and
    no vectors (vector_bytes None: loops stay scalar, the interpreter runs them as written)."""

    kind: str = "c"
    cc: str | None = None
    cflags: str | None = None
    vector_bytes: int | None = None
    align: int = ALIGN
    schedules: str = "cpu"  # the family of default schedules (ember.ops' schedules are for CPUs)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"unknown target {self.kind!r}; targets are {KINDS} or an ember.target.Target")
        if self.kind == "c":
            cc, cflags = config.resolve("cc", self.cc), config.resolve("cflags", self.cflags)
            object.__setattr__(self, "cc", cc)
            object.__setattr__(self, "cflags", cflags)
            if self.vector_bytes is None:
                object.__setattr__(self, "vector_bytes", _vector_bytes(cc, cflags))

    @property
    def backend(self):
        """The backend that compiles for this target (ember.backends: registered by kind)."""
        return backends.get(self.kind)

    @property
    def lanes(self) -> int:
        """float32 values in one SIMD register (1 without vectors)."""
        return max(1, (self.vector_bytes or 0) // 4)

    @property
    def key(self) -> str:
        """The name schedules are tuned under: "c | <CPU model> | <SIMD features, sorted>" (the
        features the compiler enables under its flags), or "python"."""
        if self.kind != "c":
            return self.kind
        features = sorted({m.rstrip("_").lower() for m in _SIMD_MACRO.findall(_macros(self.cc, self.cflags))
                           if not m.endswith("_MATH__")})
        return f"c | {_cpu_model()} | {' '.join(features)}"

    def describe(self) -> dict:
        """What a compiled model's manifest records of its target."""
        return {"target": self.kind, "machine": platform.machine(), "vector_bytes": self.vector_bytes,
                **({"cc": self.cc, "cflags": self.cflags} if self.kind == "c" else {})}


def as_target(target: str | Target = "c", *, cc: str | None = None, cflags: str | None = None) -> Target:
    """The Target that `target` names ("c", "python") or is; cc and cflags (checked options)
    override a C target's."""
    if isinstance(target, Target):
        if cc is None and cflags is None:
            return target
        if target.kind != "c":
            raise ConfigError(f"target {target.kind!r} has no C compiler: cc and cflags are for target 'c'")
        return Target("c", cc if cc is not None else target.cc, cflags if cflags is not None else target.cflags,
                      align=target.align, schedules=target.schedules)
    if not isinstance(target, str):
        raise ConfigError(f"target must be one of {KINDS} or an ember.target.Target, got {type(target).__name__}")
    if target != "c" and (cc is not None or cflags is not None):
        raise ConfigError(f"target {target!r} has no C compiler: cc and cflags are for target 'c'")
    return Target(target, config.resolve("cc", cc) if target == "c" else None,
                  config.resolve("cflags", cflags) if target == "c" else None)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
