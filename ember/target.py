"""What the machine that runs the kernels offers: the SIMD width the C compiler targets.

Read once from the compiler's own predefined macros under the configured flags
(`cc -march=native -dM -E`), so it agrees with what `-march=native` will generate.
"""

from __future__ import annotations

import functools
import shlex
import subprocess

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
