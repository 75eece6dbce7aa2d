"""Compiling C source to a shared library, cached by content.

`build_library(source)` returns the path of a shared library built from `source`. The cache key is
the sha256 of everything that decides the binary: the source, the compiler, its flags, and the
compiler's `--version` text (asked once per process and compiler). Libraries live in
`<cache_dir>/kernels/<key[:2]>/<key>.so` (another folder than kernels/ when asked: ember's call
extension), with the C source next to them when keep_source is on.
A build compiles in a temporary folder beside its destination and `os.replace`s the results into
place under a per-key `fcntl` lock, so concurrent processes compile a source once and never load
a half-written library. `explain_cache_key` returns the parts of a key: diff two of them to see
why a build missed the cache.

Every library has a sidecar, `<key>.json`, with the size and sha256 of its bytes, written before
the library is moved into place. An entry is used only when its bytes match its sidecar: a
truncated or damaged library (a full disk, a copy gone wrong, an entry of an older ember without a
sidecar) is compiled again, never loaded. An intact entry found is a use (it is touched), and an
entry installed is counted in its folder's bytes, trimmed to its limit (ember.runtime.disk_cache).

A source may hold several translation units, separated by UNIT_SEPARATOR lines (a large
model's kernels: ember.backends.c): each is compiled to an object at once, in parallel, and the
objects are linked into the library; the key is the whole source's, and a compile error points
at the lines of the unit it is in.

The compiler runs in a process group of its own (`run_compilers`), killed whole if the build is
interrupted (Ctrl-C, a worker process told to stop): no compiler process outlives the build.

A compiler error raises `BuildError` with the compiler's error lines, each followed by the
generated source lines it points at; so does a compiler that cannot be run, and one that exits 0
without writing the library (EMBER_CC=true). A cache folder that cannot be written (no
permission, a full disk: the compiler's own "No space left on device" included) raises
ConfigError naming the folder and EMBER_CACHE_DIR.

Options read (ember.config): cc (a command, split like a shell would: "ccache gcc"), cflags,
cache_dir, keep_source; the cc= and cflags= keywords are checked as the options are.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import config
from ..errors import ArtifactError, BuildError, ConfigError
from . import disk_cache
from .library import Digest, read_checked

LIBS = ("-lm",)  # after the source file, where the linker wants libraries
UNIT_SEPARATOR = "\n/* ember: the next translation unit */\n"  # between the units of one source

_ERROR = re.compile(r"^(?P<file>[^\s:]+\.c):(?P<line>\d+):(?P<col>\d+): (?:fatal )?error: .*$", re.M)
_MAX_CONTEXTS = 5  # errors shown with their source lines; the rest only as the compiler's line
_NO_SPACE = "No space left on device"  # strerror(ENOSPC), as the compiler and the linker print it
VERSION_TIMEOUT_S = 60  # `cc --version` answers at once; a command that does not is no compiler


def build_library(source: str, *, cc: str | None = None, cflags: str | Sequence[str] | None = None,
                  folder: str = "kernels") -> Path:
    """The shared library of a C translation unit, compiled unless the cache has it (in the cache's
    `folder`: kernels and models in kernels/, ember's call extension apart)."""
    parts = explain_cache_key(source, cc=cc, cflags=cflags, folder=folder)
    path = Path(parts["path"])
    if _intact(path):
        return path
    _writable_folder(path.parent)
    try:
        with _locked(path.with_suffix(".lock")):
            if not _intact(path):  # another process may have built it while we waited
                _compile(source, parts["cc"], shlex.split(parts["cflags"]), path)
    except OSError as e:  # writing the source, the library or its sidecar (a full disk, a quota)
        raise _unwritable(path.parent, e.strerror or str(e)) from None
    return path


def is_cached(source: str, *, cc: str | None = None, cflags: str | Sequence[str] | None = None) -> bool:
    """Whether the cache holds an intact library of `source` (build_library would compile nothing)."""
    return _intact(Path(explain_cache_key(source, cc=cc, cflags=cflags)["path"]))


def explain_cache_key(source: str, *, cc: str | None = None, cflags: str | Sequence[str] | None = None,
                      folder: str = "kernels") -> dict[str, str]:
    """The parts of the build cache key of `source`, the key itself and the library's path."""
    cc = config.resolve("cc", cc)
    flags = shlex.split(config.resolve("cflags", cflags))
    parts = {
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "cc": cc,
        "cflags": shlex.join(flags),
        "libs": shlex.join(LIBS),
        "compiler_version": compiler_version(cc),
    }
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    path = Path(config.get("cache_dir")) / folder / key[:2] / f"{key}.so"
    return {**parts, "key": key, "path": str(path)}


@functools.cache
def compiler_version(cc: str) -> str:
    """The `--version` text of a compiler command (cached for the life of the process)."""
    try:
        out = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, errors="replace",
                             check=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"cannot run the C compiler {cc!r} ({e}); install one or choose another "
                         f"with the cc option (EMBER_CC, or cc=)") from e
    return out.stdout.strip()


def _writable_folder(folder: Path) -> None:
    """Create the cache folder `folder` if needed; ConfigError naming EMBER_CACHE_DIR when it
    cannot be created or written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the build cache folder {folder} ({e.strerror}); set EMBER_CACHE_DIR "
                          f"to a folder you can write") from e
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write to the build cache folder {folder}; set EMBER_CACHE_DIR to a folder "
                          f"you can write")


def _unwritable(folder: Path, why: str) -> ConfigError:
    return ConfigError(f"cannot write to the build cache folder {folder} ({why}); free space there or set "
                       f"EMBER_CACHE_DIR to a folder you can write")


def _intact(path: Path) -> bool:
    """Whether the library at `path` is there and matches its sidecar (touched first: a trim
    leaves an entry just used to the process about to load it)."""
    disk_cache.touch(path)
    try:
        recorded = json.loads(path.with_suffix(".json").read_text())
        digest = Digest(recorded["size"], recorded["sha256"])
        read_checked(path, digest, "its sidecar")
    except (OSError, ValueError, KeyError, TypeError, ArtifactError):
        return False
    return True


def _install(lib: Path, path: Path) -> None:
    """Move a freshly built library to `path`, its sidecar first: a library in the cache is whole
    and a reader checks it against the sidecar written for it."""
    sidecar = lib.with_suffix(".json")
    sidecar.write_text(json.dumps(Digest.of_file(lib).to_json()) + "\n")
    nbytes = lib.stat().st_size + sidecar.stat().st_size
    os.replace(sidecar, path.with_suffix(".json"))
    os.replace(lib, path)
    disk_cache.added(path, nbytes)


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compile(source: str, cc: str, flags: list[str], path: Path) -> None:
    units = source.split(UNIT_SEPARATOR)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        srcs, lib = [Path(tmp) / f"{path.stem[:16]}_{k}.c" for k in range(len(units))], Path(tmp) / "lib.so"
        if len(units) == 1:
            srcs = [Path(tmp) / f"{path.stem[:16]}.c"]
        for src, unit in zip(srcs, units):
            src.write_text(unit)
        if len(units) == 1:
            steps = [[[*shlex.split(cc), *flags, "-o", str(lib), str(srcs[0]), *LIBS]]]
        else:  # each unit to an object, all at once; then one link
            objs = [src.with_suffix(".o") for src in srcs]
            steps = [[[*shlex.split(cc), *flags, "-c", "-o", str(o), str(src)] for src, o in zip(srcs, objs)],
                     [[*shlex.split(cc), *flags, "-o", str(lib), *map(str, objs), *LIBS]]]
        for cmds in steps:
            try:
                results = run_compilers(cmds)
            except OSError as e:
                raise BuildError(f"cannot run the C compiler {cc!r} ({e}); install one or choose another with the "
                                 f"cc option (EMBER_CC, or cc=)", source=source) from e
            for cmd, result in zip(cmds, results):
                if result.returncode != 0 and _NO_SPACE in result.stderr:  # an output could not be written
                    raise _unwritable(path.parent, f"the C compiler could not write its output: {_NO_SPACE.lower()}, "
                                                   f"there or in its temporary folder")
                if result.returncode != 0:
                    unit = next((u for src, u in zip(srcs, units) if str(src) in cmd), source)
                    raise BuildError(_error_message(cmd, result, unit), source=source,
                                     compiler_output=result.stderr)
        if not lib.is_file() or lib.stat().st_size == 0:
            said = (result.stdout + result.stderr).strip()
            raise BuildError(f"the C compiler {cc!r} (EMBER_CC, or cc=) exited 0 but produced no library: "
                             f"{shlex.join(cmd)}" + (f"\n{said}" if said else ""), source=source,
                             compiler_output=result.stderr)
        if config.get("keep_source"):
            path.with_suffix(".c").write_text(source)
        _install(lib, path)  # last: a library in the cache is always complete


def run_compilers(cmds: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run compiler commands at once, each to its end, their output captured. Each compiler runs
    in a process group of its own, all killed whole when the wait ends any other way (a Ctrl-C, a
    worker told to stop): killing a driver alone would leave the cc1, as and ld it
    started running."""
    procs: list[subprocess.Popen] = []
    try:
        for cmd in cmds:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          stdin=subprocess.DEVNULL, text=True, errors="replace", process_group=0))
        outputs = [proc.communicate() for proc in procs]  # (one at a time: none waits on another)
    except BaseException:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    finally:
        for proc in procs:
            for stream in (proc.stdout, proc.stderr):
                stream.close()
    return [subprocess.CompletedProcess(cmd, proc.returncode, out, err)
            for cmd, proc, (out, err) in zip(cmds, procs, outputs)]


def _error_message(cmd: list[str], result: subprocess.CompletedProcess, source: str) -> str:
    lines = [f"the C compiler failed (exit status {result.returncode}): {shlex.join(cmd)}"]
    errors = list(_ERROR.finditer(result.stderr))
    if not errors:  # not an error in the source (a bad flag, say): show what the compiler said
        lines.append(result.stderr.strip())
    source_lines = source.splitlines()
    for k, m in enumerate(errors):
        lines.append(m.group(0))
        if k < _MAX_CONTEXTS:
            lines += _context(source_lines, int(m["line"]))
    return "\n".join(lines)


def _context(source_lines: list[str], line: int, around: int = 2) -> list[str]:
    """The generated source around `line` (1-based), numbered, the line itself marked with `>`."""
    lo, hi = max(1, line - around), min(len(source_lines), line + around)
    return [f"{'>' if n == line else ' '} {n:5d} | {source_lines[n - 1]}" for n in range(lo, hi + 1)]
