"""Every folder of the cache directory bounded, its least recently used entries removed first.

    added(path, nbytes)      an entry just renamed into place: counted, and the folder trimmed
                             when it passes its limit
    touch(path)              a hit: the entry becomes the most recently used
    usage(name) -> Usage     bytes and entries, by a scan    limit(name)    clear(name)

The cache directory (EMBER_CACHE_DIR) holds one folder per cache, each named in SHARES: the
build cache (kernels, extensions), the libraries loaded by content (libraries), lowered kernels
(lowered), whole compiled models and their other keys (models, model-keys), NVRTC's binaries
(cuda) and the tile kernels' (triton). Their keys hold ember's own source or the kernel's, so
without a bound they grow with every change of ember and every new model. EMBER_CACHE_LIMIT
(default 8G: ember.config) is the whole directory's budget, split among the folders by SHARES:
half for models (4 GiB, as large as their weights: BERT-base's entry is 0.4 GiB), an eighth each
for kernels and lowered, and the rest for the small ones. ccache keeps 5 GB of objects; ember's
kernels and lowered kernels are its objects, its models a cache of their own.

An entry is a file or folder in a folder's shards (`<name>/<xx>/`, xx two characters of its
key) or at its top (triton), its files grouped by their name up to the first dot (a library,
its sidecar, its source and its lock are one entry). A name starting with a dot is a write under
way (a temporary renamed into place when whole); one STALE_S old is a killed process's, removed.

Least recently used: a hit touches the entry (its mtime), and the entries with the oldest
mtimes go first. Cheap: a put adds its bytes to an approximate running total (`.usage` at the
folder's top, under an fcntl lock: 13 us); only when the total passes the limit, when there is none
yet, every RESCAN_PUTS puts or once the last scan is STALE_S old does it scan the folder (one
stat a file: ~/.cache/ember's 165,000 entries in 2.7 s on a loaded 2-core AMD EPYC), remove the
oldest entries down to LOW_WATER of the limit (so that the next puts do not scan again) and
write the exact total. One process scans at a time (the others skip). An entry used within
YOUNG_S is never removed (another process may be between finding it and reading it), nor is the
entry just put. Removing unlinks: a process that has the file open or mapped (a loaded library,
a model's mapped weights) keeps reading it on POSIX; an entry that cannot be removed (in use on
Windows) is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .. import config

# the cache directory's folders and their shares of EMBER_CACHE_LIMIT (out of sum(SHARES.values()))
SHARES = {"models": 16, "kernels": 4, "lowered": 4, "libraries": 2, "cuda": 2, "triton": 2, "extensions": 1,
          "model-keys": 1}
LOW_WATER = 0.9  # a trim removes entries down to this fraction of the limit
STALE_S = 3600  # a temporary this old is a killed process's write
YOUNG_S = 60  # an entry used this recently is never removed
RESCAN_PUTS = 10000  # puts between scans, whatever the running total says (others' writes, removals by hand)
INDEX = ".usage"  # the running total at a folder's top ("bytes puts scanned-at"); .usage.lock: the scan's lock
_SHARD = re.compile(r"[0-9a-f]{2}")


@dataclass(frozen=True)
class Usage:
    bytes: int
    entries: int


def root(name: str) -> Path:
    """The folder of the cache `name` (one of SHARES)."""
    return Path(config.get("cache_dir")) / name


def limit(name: str) -> int:
    """The bytes the cache `name` keeps at most: its share of EMBER_CACHE_LIMIT."""
    return config.get("cache_limit") * SHARES[name] // sum(SHARES.values())


def touch(path: Path) -> None:
    """Mark the entry at `path` used now (the last to be removed)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def added(path: Path, nbytes: int | None = None) -> None:
    """Count the entry just renamed into place at `path` (`nbytes`: its bytes; None: measured),
    and trim its cache when the running total passes the limit (see the module doc); nothing
    when the cache cannot be written."""
    top = _top(path)
    if top.name not in SHARES:
        raise ValueError(f"{path} is in no cache folder of ember ({', '.join(SHARES)})")
    with contextlib.suppress(OSError):
        nbytes = _size(path) if nbytes is None else nbytes
        with _index(top) as fd:
            total, puts, scanned = _read_index(fd)
            _write_index(fd, total + nbytes, puts + 1, scanned)
        if total + nbytes > limit(top.name) or puts + 1 >= RESCAN_PUTS or time.time() - scanned > STALE_S:
            trim(top, limit(top.name), keep=path)


def usage(name: str) -> Usage:
    """The bytes and entries of the cache `name`, by a scan."""
    entries = _entries(root(name), remove_stale=False)
    return Usage(sum(size for _, size, _ in entries.values()), len(entries))


def clear(name: str) -> int:
    """Remove every entry of the cache `name` (but writes under way); the bytes removed."""
    before = usage(name).bytes
    trim(root(name), 0, young_s=-1.0, low_water=0.0, wait=True)
    return before - usage(name).bytes


def trim(top: Path, most: int, keep: Path | None = None, young_s: float | None = None,
         low_water: float | None = None, wait: bool = False) -> None:
    """Remove the least recently used entries of the cache folder `top` down to `low_water`
    (LOW_WATER) of `most` bytes once they pass `most` (none used within `young_s` seconds,
    YOUNG_S, nor the entry `keep`), and stale temporaries; write the exact total. Nothing when
    another process is trimming it, unless asked to `wait` for it."""
    if not top.is_dir():
        return
    young_s, low_water = YOUNG_S if young_s is None else young_s, LOW_WATER if low_water is None else low_water
    with open(top / f"{INDEX}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # (another process trims it)
        entries = _entries(top, remove_stale=True)
        total = sum(size for _, size, _ in entries.values())
        kept = None if keep is None else _group(keep)
        if total > most:
            for group, (_, size, members) in sorted(entries.items(), key=lambda e: e[1][0]):
                if total <= most * low_water:
                    break
                if group == kept or _used_since(members, time.time() - young_s):
                    continue
                if _remove(members):
                    total -= size
        with _index(top) as fd:
            _write_index(fd, total, 0, int(time.time()))


def _top(path: Path) -> Path:
    """The cache folder of an entry: above its shard, or its parent."""
    return path.parent.parent if _SHARD.fullmatch(path.parent.name) else path.parent


def _group(path: Path) -> tuple[Path, str]:
    return path.parent, path.name.split(".")[0]


@contextlib.contextmanager
def _index(top: Path):
    """The folder's running total, open and locked."""
    fd = os.open(top / INDEX, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _read_index(fd: int) -> tuple[int, int, int]:
    """(bytes, puts, when the last scan was: 0 where there is no index, or a damaged one)."""
    words = os.pread(fd, 64, 0).split()
    if len(words) == 3 and all(w.isdigit() for w in words):
        return int(words[0]), int(words[1]), int(words[2])
    return 0, 0, 0


def _write_index(fd: int, total: int, puts: int, scanned: int) -> None:
    """Overwrite the record in place, at a fixed width: truncating the file at each put took 2 ms
    here (so only a longer file, damaged, is truncated)."""
    record = f"{total:20d} {puts:10d} {scanned:12d}\n".encode()
    os.pwrite(fd, record, 0)
    if os.fstat(fd).st_size > len(record):
        os.ftruncate(fd, len(record))


def _entries(top: Path, remove_stale: bool) -> dict[tuple[Path, str], tuple[float, int, list[Path]]]:
    """The entries of the cache folder `top`: (folder, name up to the first dot) -> (latest
    mtime, bytes, their files and folders); with `remove_stale`, stale temporaries removed.
    One stat a file (os.scandir): 100,000 entries in about a second."""
    out: dict[tuple[Path, str], tuple[float, int, list[Path]]] = {}
    now = time.time()
    shards = [Path(e.path) for e in _listed(top) if _SHARD.fullmatch(e.name) and e.is_dir()]
    for place in [top, *shards]:
        for item in _listed(place):
            if place == top and (item.name.startswith(INDEX) or _SHARD.fullmatch(item.name) and item.is_dir()):
                continue
            try:
                info = item.stat(follow_symlinks=False)
                if item.name.startswith("."):
                    if remove_stale and now - info.st_mtime > STALE_S:
                        _remove([Path(item.path)])
                    continue
                size = _size(Path(item.path)) if item.is_dir(follow_symlinks=False) else info.st_size
            except OSError:  # (removed or renamed meanwhile)
                continue
            group = (place, item.name.split(".")[0])
            last, total, members = out.get(group, (0.0, 0, []))
            out[group] = (max(last, info.st_mtime), total + size, [*members, Path(item.path)])
    return out


def _listed(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _used_since(members: list[Path], since: float) -> bool:
    """Whether an entry was used after `since` (asked again just before removing it: a hit may
    have touched it since the scan)."""
    for m in members:
        with contextlib.suppress(OSError):
            if m.stat().st_mtime > since:
                return True
    return False


def _remove(members: list[Path]) -> bool:
    """Remove an entry's files and folders; False when one could not be (in use on Windows)."""
    whole = True
    for m in members:
        try:
            if m.is_dir() and not m.is_symlink():
                shutil.rmtree(m)
            else:
                m.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            whole = False
    return whole
