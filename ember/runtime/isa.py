"""The instruction-set extensions a built library needs on the machine that loads it.

The C build compiles every kernel with the target's one -march (ember.target), so the compiler
may emit any instruction that -march enables anywhere: in the functions of the units' intrinsics
(`__attribute__((target))`), in code behind the -march's macros (`#if __AVX512VNNI__`), and in
plain loops it vectorizes. What a library needs is therefore read from the library itself: the
x86 units' extensions (VNNI, AVX512-BF16, AVX512-FP16, AMX) have instructions of their own,
found by disassembling it (objdump); every other extension the -march enables (AVX2, FMA, the
AVX-512 foundation and its BW/VL/DQ subsets, ARM's) has none that tells it apart from plain
vector code, so it stays needed. A float32 model built on a machine with AVX512-BF16 then loads
where the rest is present; one whose kernels use vdpbf16ps still needs AVX512-BF16 (as does one
whose kernel picks the unit at run time, `__builtin_cpu_supports`: its instructions are there).
Where the library cannot be disassembled (no objdump), every extension of the -march stays
needed. The artifact's manifest records the result, read when a model is saved (objdump takes a
few tenths of a second on a 2 MB library, which a compile need not pay), and ember.load checks
it against /proc/cpuinfo; a model in memory keeps its target's features.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable

# an extension the units' code needs: the instructions only it has (AT&T mnemonics, objdump's)
UNIT_INSTRUCTIONS = {
    "avx512vnni": re.compile(r"vpdp(?:busds?|wssds?)"),  # (AVX-VNNI's VEX forms too: counted as it)
    "avx512bf16": re.compile(r"vcvtne2?ps2bf16\w*|vdpbf16ps"),
    # packed or scalar half-precision arithmetic and conversions (F16C's vcvtph2ps/vcvtps2ph are not)
    "avx512fp16": re.compile(r"vmovw|v(?!cvtps2ph\b)\w+(?:ph|sh)x?|vcvtt?[ps]h2(?!ps\b)\w+"),
    "amx-tile": re.compile(r"ldtilecfg|sttilecfg|tile(?:loadd\w*|stored|release|zero)"),
    "amx-bf16": re.compile(r"tdpbf16ps"),
    "amx-int8": re.compile(r"tdpb[su][su]d"),
}
# an instruction of objdump's listing (a tab, a {vex} or {evex} mark, the mnemonic) that may be a unit's
_CANDIDATE = re.compile(rb"\t(?:\{\w+\} )?(v\w*(?:ph|sh)x?|vcvtt?[ps]h2\w+|vpdp\w+|vcvtne\w+|vdpbf16ps|vmovw|"
                        rb"ldtilecfg|sttilecfg|tile\w+|tdp\w+)[ \n]")


def needed_features(library: str | os.PathLike, features: Iterable[str]) -> list[str]:
    """The extensions of `features` (the target's) that the library at path `library` needs (see
    the module doc), sorted."""
    features = set(features)
    units = features & UNIT_INSTRUCTIONS.keys()
    if not units:
        return sorted(features)
    found = _unit_mnemonics(str(library))
    used = units if found is None else {u for u in units if any(map(UNIT_INSTRUCTIONS[u].fullmatch, found))}
    return sorted((features - units) | used)


@functools.lru_cache(maxsize=64)  # (a build cache's library is named by its source and flags: the same code)
def _unit_mnemonics(library: str) -> frozenset[str] | None:
    """The instructions of the library's code that may be a unit's (CANDIDATE: every other one
    is left out, which makes the scan of a long listing cheap); None where it cannot be
    disassembled."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    try:
        listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", library], capture_output=True,
                                 timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return frozenset(m.decode() for m in _CANDIDATE.findall(listing))
