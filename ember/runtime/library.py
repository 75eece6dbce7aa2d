"""Files checked against a recorded digest, and shared libraries loaded by their content.

glibc's dlopen hands back the library it already holds for a path it has loaded, without looking at
the file again: load model A from a folder, save model B over it, load again, and B's calls would
run A's code. So ember dlopens no path whose bytes may change. `open_library(path)` reads the
library's bytes once, hashes them (sha256), and dlopens a copy named by that hash,
`<cache_dir>/libraries/<sha[:2]>/<sha>.so`. The copy is written to a temporary name and renamed,
so it is whole or absent; one already there is compared with the bytes first and replaced when it
differs (a damaged cache); a copy found is touched and one written counted, its folder trimmed
to its limit (ember.runtime.disk_cache). A path named by its content holds no other bytes, so one path is one
library, and a file changed in a folder loads as the new library it is.
Each loaded library keeps its copy open (`Library.kept`), so that a model whose copy a trim
removed still saves: one descriptor per content (models of one library share it, as they share
dlopen's handle), for at most KEPT_MAX contents at once, so that loading many models does not run
the process out of descriptors (the usual limit is 1024); a library past that keeps none, and
saving it once its copy is gone is an ArtifactError that says so.

`read_checked(path, digest)` reads a file and checks it against the `Digest` (size, hash) that
a manifest or a build-cache sidecar recorded: a truncated, extended or edited file is an
ArtifactError that names it, before anything parses or loads its bytes. With `aligned`, the bytes
are read into a read-only NumPy buffer placed so that a given offset of the file (a weights file's
data) starts on a boundary, and a loaded model takes its weights from there without a copy.

The first library that brings libgomp into the process is loaded with a short OpenMP spin count
(ember.runtime.openmp).

Options read (ember.config): cache_dir.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import mmap
import os
import stat
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import config
from ..errors import ArtifactError, ConfigError
from . import disk_cache, openmp

HASHES = ("sha256", "xxh3_128")  # what a digest may be: sha256, or xxh3-128 (the xxhash package)
HASH_WINDOW = 64 << 20  # bytes of a file mapped at a time to hash it (a multiple of mmap's granularity)
KEPT_MAX = 256  # libraries' copies kept open at once, at most (a quarter of the usual descriptor limit)


def _hasher(algorithm: str):
    if algorithm == "sha256":
        return hashlib.sha256()
    try:
        import xxhash
    except ImportError:
        raise ArtifactError(f"a file was hashed by {algorithm}, which needs the xxhash package: pip install "
                            f"xxhash (or compile the model again)") from None
    return xxhash.xxh3_128()


@dataclass(frozen=True)
class Digest:
    """The size and hash of a file's bytes: sha256, or xxh3-128 where a writer asks for it (the
    model cache's weights: 34 GB/s on one core, sha256 2 GB/s)."""

    size: int
    value: str
    algorithm: str = "sha256"

    @classmethod
    def of(cls, data: bytes, algorithm: str = "sha256") -> Digest:
        h = _hasher(algorithm)
        h.update(data)
        return cls(len(data), h.hexdigest(), algorithm)

    @classmethod
    def of_file(cls, path: Path, algorithm: str = "sha256") -> Digest:
        """The digest of a file just written, hashed through mappings of its pages: reading it
        into memory first would copy the bytes once more (a model's weights file: 0.2 s of CPU
        per 400 MB). One window of HASH_WINDOW bytes mapped at a time: the pages of a whole
        mapping count in the process's resident memory until it is closed (a cold compile's
        peak was the weights' once more, while the model cache hashed their file)."""
        h = _hasher(algorithm)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for at in range(0, size, HASH_WINDOW):
                with mmap.mmap(f.fileno(), min(HASH_WINDOW, size - at), access=mmap.ACCESS_READ, offset=at) as data:
                    h.update(data)
        return cls(size, h.hexdigest(), algorithm)

    @classmethod
    def from_json(cls, entry: dict, recorded_in: str) -> Digest:
        """The digest a manifest records: its size and one hash of HASHES."""
        found = [a for a in HASHES if a in entry]
        if len(found) != 1 or not isinstance(entry[found[0]], str):
            raise ArtifactError(f"{recorded_in}: the record of {entry.get('path')!r} has {len(found)} hashes; one of "
                                f"{', '.join(HASHES)} expected: the manifest was edited; save the model again")
        return cls(entry["size"], entry[found[0]], found[0])

    def to_json(self) -> dict:
        return {"size": self.size, self.algorithm: self.value}


class Kept:
    """A library's copy open for reading, one descriptor shared by every Library of that file
    (by device and inode), closed when the last of them goes."""

    def __init__(self, fd: int):
        self.fd = fd
        weakref.finalize(self, os.close, fd)


_KEPT: weakref.WeakValueDictionary[tuple[int, int], Kept] = weakref.WeakValueDictionary()
_KEPT_LOCK = threading.Lock()


@dataclass(frozen=True)
class Library:
    """A loaded shared library: `handle` (ctypes), the content-addressed `path` it was loaded
    from, the `digest` of its bytes, and `kept`, that copy open for reading: a trim of the cache
    (ember.runtime.disk_cache) or a hand may remove the file while the library is loaded, and
    saving the model needs its bytes (`on_disk` writes the copy back from it). None past KEPT_MAX
    libraries (see the module doc)."""

    path: Path
    digest: Digest
    handle: ctypes.CDLL
    kept: Kept | None = field(default=None, compare=False, repr=False)

    def on_disk(self) -> Path:
        """`path`, written back from `kept` (its bytes checked against `digest`) where the file
        left the cache folder since the library was loaded."""
        if self.path.is_file():
            return self.path
        if self.kept is None:
            raise ArtifactError(f"the library loaded from {self.path} left the cache folder, and this process kept "
                                f"no copy of it (more than {KEPT_MAX} libraries were loaded at once): compile the "
                                f"model again to save it")
        data = os.pread(self.kept.fd, self.digest.size + 1, 0)
        if len(data) != self.digest.size or Digest.of(data, self.digest.algorithm) != self.digest:
            raise ArtifactError(f"the library loaded from {self.path} no longer has the bytes it was loaded with")
        _content_copy(data, self.digest)
        return self.path


def _kept(copy: Path) -> Kept | None:
    """The descriptor kept open on the file at `copy` (shared where one is open already; a new one
    while fewer than KEPT_MAX are), or None."""
    with _KEPT_LOCK:
        try:
            st = os.stat(copy)
            kept = _KEPT.get((st.st_dev, st.st_ino))
            if kept is not None or len(_KEPT) >= KEPT_MAX:
                return kept
            fd = os.open(copy, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))  # (just touched or written: a trim
            # leaves it to this process)
        except OSError as e:
            raise ArtifactError(f"cannot read {copy} ({e.strerror or e})") from None
        st = os.fstat(fd)  # (the file opened, should another have replaced the one looked up)
        kept = _KEPT[(st.st_dev, st.st_ino)] = Kept(fd)
        return kept


Aligned = tuple[int, Callable[[bytes], int]]  # (alignment, the offset to align, from the file's first 8 bytes)


def read_checked(path: Path, digest: Digest | None, recorded_in: str, aligned: Aligned | None = None) -> bytes:
    """The bytes of `path`, which must match `digest` when one is given (`recorded_in` names the
    file that recorded it, for the error). The size is checked before anything is read. With
    `aligned`, a read-only NumPy uint8 array of them (`read_regular`)."""
    data = read_regular(path, None if digest is None else digest.size, recorded_in, aligned)
    if digest is None:
        return data
    got = Digest.of(data, digest.algorithm).value
    if got != digest.value:
        raise ArtifactError(f"{path} has {digest.algorithm} {got}, {recorded_in} records {digest.value}: the file was "
                            f"changed after it was written; save or compile the model again")
    return data


def read_regular(path: Path, size: int | None = None, recorded_in: str = "", aligned: Aligned | None = None) -> bytes:
    """The bytes of the regular file at `path` (a symlink followed), of `size` bytes when given.
    Anything else is an ArtifactError before a byte is read: a FIFO would block the read until a
    writer came, a device (a symlink to /dev/zero) would never end, a larger file would be read
    whole only to be refused. Opened without blocking, so that opening a FIFO returns at once.
    aligned=(align, at): the bytes in a read-only NumPy uint8 array where the byte at offset
    at(first 8 bytes) starts on an `align`-byte boundary."""
    with _opened(path, size, recorded_in) as f:
        st = os.fstat(f.fileno())
        try:
            if aligned is not None:  # (one byte more than recorded: to see a longer file)
                data = _read_aligned(f, (st.st_size if size is None else size) + 1, *aligned)
            else:
                data = f.read() if size is None else f.read(size + 1)
        except OSError as e:
            raise ArtifactError(f"cannot read {path} ({e.strerror or e})") from None
    if size is not None and len(data) != size:  # changed while it was read
        raise ArtifactError(f"{path} has {len(data)} bytes, {recorded_in} records {size}: the file was "
                            f"truncated or replaced after it was written; save or compile the model again")
    return data


def _opened(path: Path, size: int | None, recorded_in: str):
    """The regular file at `path`, opened for reading, of `size` bytes when given (ArtifactError
    otherwise: see `read_regular`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ArtifactError(f"cannot read {path} ({e.strerror or e})") from None
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = (f"{path} is not a regular file (a FIFO, a device or a folder); ember reads the files of a saved "
                   f"model only from regular files")
    elif size is not None and st.st_size != size:
        problem = (f"{path} has {st.st_size} bytes, {recorded_in} records {size}: the file was truncated or "
                   f"replaced after it was written; save or compile the model again")
    if problem:
        f.close()
        raise ArtifactError(problem)
    return f


def map_regular(path: Path, size: int, recorded_in: str) -> np.ndarray:
    """The bytes of the regular file at `path`, of `size` bytes, as a read-only uint8 array over
    a mapping of its pages (nothing copied; `read_regular`'s checks). A file truncated while the
    array is in use faults the process (SIGBUS): for files no one writes in place.
    Mapped by libc's mmap, not Python's, which keeps a duplicate of the file's descriptor open for
    as long as the mapping lives (one a model-cache hit: many hits ran out of descriptors); its
    pages read-only as Python's ACCESS_READ maps them, behind a read-only buffer (the array's
    writeable flag cannot be set)."""
    with _opened(path, size, recorded_in) as f:
        if not size:
            return np.empty(0, np.uint8)
        libc = _libc()
        at = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        if at is None or at == ctypes.c_void_p(-1).value:
            raise ArtifactError(f"cannot map {path} ({os.strerror(ctypes.get_errno())})")
    pages = (ctypes.c_uint8 * size).from_address(at)
    weakref.finalize(pages, libc.munmap, at, size)
    return np.frombuffer(memoryview(pages).toreadonly(), np.uint8)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's mmap and munmap."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _read_aligned(f, limit: int, align: int, at: Callable[[bytes], int]) -> np.ndarray:
    """At most `limit` bytes of `f` in a read-only array placed so that offset at(head) is aligned."""
    head = f.read(8)
    offset = at(head) if len(head) == 8 else 0
    buf = np.empty(limit + align, np.uint8)
    start = (-(buf.ctypes.data + offset)) % align
    out = buf[start:start + limit]
    k = min(len(head), limit)
    out[:k] = np.frombuffer(head[:k], np.uint8)
    n = k + (f.readinto(memoryview(out)[k:]) or 0 if k < limit else 0)
    data = out[:n]
    data.flags.writeable = False
    return data


def open_library(path: str | Path, digest: Digest | None = None, recorded_in: str = "") -> Library:
    """dlopen the library at `path` by its content (see the module doc); its bytes must match
    `digest` when one is given."""
    path = Path(path)
    data = read_checked(path, digest, recorded_in)
    digest = digest or Digest.of(data)  # a digest given is the bytes' own once checked
    copy = _content_copy(data, digest)
    kept = _kept(copy)
    try:
        handle = openmp.load(lambda: ctypes.CDLL(str(copy)))
    except OSError as e:
        raise ArtifactError(f"{path} is not a loadable shared library ({e})") from None
    return Library(copy, digest, handle, kept)


def _content_copy(data: bytes, digest: Digest) -> Path:
    """The content-addressed copy of `data`, written unless it is there intact."""
    sha = digest.value if digest.algorithm == "sha256" else Digest.of(data).value
    copy = Path(config.get("cache_dir")) / "libraries" / sha[:2] / f"{sha}.so"
    try:
        disk_cache.touch(copy)  # (first: a trim leaves an entry just used to the process about to load it)
        if copy.is_file() and copy.read_bytes() == data:
            return copy
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(copy, data)
        disk_cache.added(copy, len(data))
    except OSError as e:
        raise ConfigError(f"cannot write {copy} ({e.strerror or e}): the cache folder must be writable; "
                          f"choose another with EMBER_CACHE_DIR") from None
    return copy


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file renamed over it: readers see the old file
    or the new one, whole, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
