"""Whether the CPU running this process has a feature, by its Linux name (/proc/cpuinfo's flags:
"avx512_vnni", "avx512_bf16", "amx_int8"), as the target reads them (ember.target.machine_flags,
the one reading of the machine's flags). A tensorized kernel's C code needs the unit on the
machine that runs it, whatever the compiler's flags: the intrinsics' functions are compiled for
their feature alone (`__attribute__((target(...)))`)."""

from __future__ import annotations

from ..target import machine_flags


def cpu_has(feature: str) -> bool:
    return feature in (machine_flags() or ())
