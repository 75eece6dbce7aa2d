"""What the machine that runs the kernels offers: the SIMD width the C compiler targets, and the
name of the target schedules are tuned for (`target_key`).

Read once from the compiler's own predefined macros under the configured flags
(`cc -march=native -dM -E`), so it agrees with what `-march=native` will generate.
"""

from __future__ import annotations

import functools
import platform
import re
import shlex
import subprocess
from pathlib import Path

from . import config

_WIDTHS = (("__AVX512F__", 64), ("__AVX__", 32), ("__SSE2__", 16), ("__ARM_NEON", 16))


@functools.cache
def _macros(cc: str, cflags: str) -> str:
    flags = [f for f in shlex.split(cflags) if f.startswith(("-m", "-march", "-mcpu"))]
    try:
        return subprocess.run([*shlex.split(cc), *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def compiler_macros() -> str:
    """The `#define` lines the configured compiler and flags predefine ("" when it cannot run)."""
    return _macros(config.get("cc"), config.get("cflags"))


def host_vector_bytes() -> int:
    """Bytes in one SIMD register of the host, as the configured compiler and flags target it."""
    macros = compiler_macros()
    return next((width for macro, width in _WIDTHS if f"#define {macro} " in macros), 16)


_SIMD_MACRO = re.compile(r"^#define __((?:SSE[2-4]\w*|SSSE3|AVX\w*|FMA4?|F16C|AMX\w*)__|ARM_NEON|"
                         r"ARM_FEATURE_(?:SVE\w*|FMA|DOTPROD|MATMUL_INT8|BF16\w*|FP16\w*)) ", re.M)


def target_key() -> str:
    """The target that schedules are tuned for: "c | <CPU model> | <SIMD features, sorted>"."""
    features = sorted({m.rstrip("_").lower() for m in _SIMD_MACRO.findall(compiler_macros())
                       if not m.endswith("_MATH__")})
    return f"c | {_cpu_model()} | {' '.join(features)}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
