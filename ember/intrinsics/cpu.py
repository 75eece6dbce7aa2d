"""Whether the CPU running this process has a feature, by its Linux name (/proc/cpuinfo's flags:
"avx512_vnni", "avx512_bf16", "amx_int8"). A tensorized kernel's C code needs the unit on the
machine that runs it, whatever the compiler's flags: the intrinsics' functions are compiled for
their feature alone (`__attribute__((target(...)))`)."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def _flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has(feature: str) -> bool:
    return feature in _flags()
