"""NVRTC: CUDA C to a cubin (or PTX), cached on disk like the C builds.

`compile_cuda(source, arch)` returns the binary for `arch` ("sm_90"): a cubin, or PTX when
`ptx=True` (the driver compiles PTX for its device when loaded). The cache key is the sha256 of
the source, NVRTC's version, the architecture, the options and the output kind; entries live in
`<cache_dir>/cuda/<key[:2]>/<key>.cubin|.ptx` with a sidecar of their size and digest, written to a
temporary name and renamed under a per-key lock (the C builds' helpers: ember.runtime.build).
Compilation is exact: no fast math (`--use_fast_math` is never passed), FMA contraction as nvcc's
default. The headers of the pip packages nvidia-cuda-runtime and nvidia-cuda-crt are on the
include path when installed (half and bfloat16 types, Tensor Core intrinsics).

`resources(source, arch)` gives each kernel's registers, static shared memory, stack and spills
as ptxas reports them (`--ptxas-options=-v`). A compile error is a BuildError with NVRTC's log,
each error followed by the source lines it points at; NVRTC missing (the `cuda` extra: pip
install ember[cuda]) is a DeviceError.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..errors import BuildError, DeviceError
from ..runtime.build import _context, _install, _intact, _locked, _writable_folder

OPTIONS = ("-std=c++17", "--fmad=true")
_ERROR = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?:catastrophic )?error: .*$", re.M)


def nvrtc():
    """The cuda.bindings nvrtc module, or a DeviceError saying how to install it."""
    try:
        from cuda.bindings import nvrtc as module
    except ImportError as e:
        raise DeviceError(f"NVRTC is not installed ({e}); install ember's cuda extra: pip install 'ember[cuda]' "
                          "(cuda-bindings, nvidia-cuda-nvrtc)") from e
    return module


@functools.cache
def nvrtc_version() -> str:
    err, major, minor = nvrtc().nvrtcVersion()
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """The CUDA headers of the pip packages (nvidia/cu13/include), if installed."""
    try:
        import nvidia
    except ImportError:
        return ()
    return tuple(str(p) for root in nvidia.__path__ for p in sorted(Path(root).glob("cu*/include")) if p.is_dir())


def compile_cuda(source: str, arch: str, *, ptx: bool = False, options: tuple[str, ...] = ()) -> bytes:
    """The cubin (or PTX) of a CUDA C unit for `arch`, compiled unless the cache has it."""
    opts = (*OPTIONS, *options)
    parts = {"source": source, "nvrtc": nvrtc_version(), "arch": arch, "options": list(opts), "ptx": ptx}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    folder = Path(config.get("cache_dir")) / "cuda" / key[:2]
    path = folder / f"{key}.{'ptx' if ptx else 'cubin'}"
    if _intact(path):
        return path.read_bytes()
    _writable_folder(folder)
    with _locked(folder / f"{key}.lock"):
        if not _intact(path):
            binary = _nvrtc_compile(source, arch, ptx, opts)
            with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
                fresh = Path(tmp) / path.name
                fresh.write_bytes(binary)
                _install(fresh, path)
    return path.read_bytes()


@dataclass(frozen=True)
class Resources:
    """What ptxas gives one kernel on its architecture: registers a thread, static shared memory
    a block (bytes), the stack frame and the bytes spilled to local memory (stored, loaded)."""

    registers: int
    shared: int
    stack: int
    spill_stores: int
    spill_loads: int


def resources(source: str, arch: str) -> dict[str, Resources]:
    """Each kernel of a CUDA C unit with its Resources (ptxas -v's report, compiled afresh for
    it: a diagnostic, not cached): what bounds the blocks a multiprocessor holds, and spills."""
    _, log = _nvrtc_run(source, arch, False, (*OPTIONS, "--ptxas-options=-v"))
    out = {}
    for entry in log.split("Compiling entry function '")[1:]:
        name = entry[:entry.index("'")]
        stack, stores, loads = (int(m) for m in _SPILLS.search(entry).groups())
        registers, shared = _USED.search(entry).group("registers", "shared")
        out[name] = Resources(int(registers), int(shared or 0), stack, stores, loads)
    return out


_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<registers>\d+) registers(?:[^\n]*?(?P<shared>\d+) bytes smem)?")


def _nvrtc_compile(source: str, arch: str, ptx: bool, opts: tuple[str, ...]) -> bytes:
    return _nvrtc_run(source, arch, ptx, opts)[0]


def _nvrtc_run(source: str, arch: str, ptx: bool, opts: tuple[str, ...]) -> tuple[bytes, str]:
    """The binary and NVRTC's log."""
    lib = nvrtc()
    err, prog = lib.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        arch_opt = f"--gpu-architecture={arch.replace('sm_', 'compute_') if ptx else arch}"
        flags = [arch_opt, *opts, *(f"--include-path={d}" for d in include_dirs())]
        (err,) = lib.nvrtcCompileProgram(prog, len(flags), [f.encode() for f in flags])
        if err != lib.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(_error_message(_log(lib, prog), source, arch), source=source,
                             compiler_output=_log(lib, prog))
        get_size, get = (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if ptx else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN)
        err, size = get_size(prog)
        _check(err, get_size.__name__)
        out = bytearray(size)  # (NVRTC writes into it: never a bytes object, which b" " * 1 is Python's shared one)
        (err,) = get(prog, out)
        _check(err, get.__name__)
        return bytes(out), _log(lib, prog)
    finally:
        lib.nvrtcDestroyProgram(prog)


def _log(lib, prog) -> str:
    err, size = lib.nvrtcGetProgramLogSize(prog)
    log = bytearray(size)  # (an empty log is one byte: written into b" " * 1, it was Python's shared b" ")
    lib.nvrtcGetProgramLog(prog, log)
    return bytes(log).rstrip(b"\0 ").decode(errors="replace")


def _error_message(log: str, source: str, arch: str) -> str:
    lines = [f"NVRTC {nvrtc_version()} failed to compile the kernel for {arch}:"]
    source_lines = source.splitlines()
    errors = list(_ERROR.finditer(log))
    if not errors:
        lines.append(log.strip())
    for k, m in enumerate(errors):
        lines.append(m.group(0))
        if k < 5:
            lines += _context(source_lines, int(m["line"]))
    return "\n".join(lines)


def _check(err, what: str) -> None:
    lib = nvrtc()
    if err != lib.nvrtcResult.NVRTC_SUCCESS:
        raise BuildError(f"{what} failed: {lib.nvrtcGetErrorString(err)[1].decode()}")
