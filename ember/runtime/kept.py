"""Values kept on disk between processes, by key: what a compile made that the next process would
make again the same way (ember.lowering keeps its lowered kernels here).

    put("lowered", key, value)      get("lowered", key) -> value, or None
    write(path, value)              read(path) -> value, or None (an entry at a caller's own path:
                                    the model cache's aliases, the tile language's kernels)

An entry is `<cache_dir>/<folder>/<k[:2]>/<k>.pkl`, k the sha256 of the caller's key (a string),
Python's version and ember's own source (`source_digest`: every module of the package), so an
entry made by other code is never read: editing ember, or installing another version, starts
afresh. An entry is the sha256 of its pickle, then the pickle; a read whose bytes do not match
(a truncated or damaged file) is a miss, as is one that does not unpickle. Writes go to a
temporary file renamed into place, so a reader sees a whole entry or none, and a cache that
cannot be written is skipped (the build, which writes there too, says why). A hit touches its
entry, and a put trims the folder to its limit, least recently used first (ember.runtime.disk_cache).

The trust is the build cache's: its libraries are loaded and run, these are unpickled; both are
the user's own folder (EMBER_CACHE_DIR).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path

from .. import config
from . import disk_cache

_EMBER = Path(__file__).resolve().parent.parent


@functools.cache
def source_digest() -> str:
    """The sha256 of ember's modules (their paths and bytes), read once per process (~30 ms)."""
    h = hashlib.sha256()
    for path in sorted(_EMBER.rglob("*.py")):
        h.update(str(path.relative_to(_EMBER)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def entry_path(folder: str, key: str, suffix: str = ".pkl") -> Path:
    """Where the value of `key` lives in `folder` of the cache (ember.runtime.model_cache keeps
    folders there, without a suffix)."""
    k = hashlib.sha256("\0".join((key, sys.version, source_digest())).encode()).hexdigest()
    return Path(config.get("cache_dir")) / folder / k[:2] / f"{k}{suffix}"


def get(folder: str, key: str):
    """The value kept under `key`, or None (none kept, or its entry is damaged)."""
    return read(entry_path(folder, key))


def read(path: Path):
    """The value of the entry at `path` (one `write` made), or None (none there, or damaged)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, payload = data[:32], data[32:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        value = pickle.loads(payload)
    except Exception:  # (bytes that match their digest but not today's classes: a miss all the same)
        return None
    disk_cache.touch(path)  # (used: the last to be removed)
    return value


def put(folder: str, key: str, value) -> None:
    """Keep `value` under `key` (atomically; nothing when the cache cannot be written)."""
    write(entry_path(folder, key), value)


def write(path: Path, value) -> None:
    """Keep `value` as the entry at `path` (an `entry_path`: one found before, by a caller that
    writes later, from another thread)."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".kept-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise
        disk_cache.added(path, 32 + len(payload))
