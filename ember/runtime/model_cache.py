"""Compiled models kept whole between processes, by key: a compile that another process made
before, from the same traced program, weights, options and target, loads that model instead of
converting, passing, lowering and building it again (ember.compile of a torch module).

    get(key) -> Artifact, or None       put(key, model, aliases=())
    alias(other, key)                   aliased(other) -> key, or None
    wait()

A key is the traced program's (ember.frontend.torch.digest); `alias` files another key for the
same entry (the module's key before tracing, ember.frontend.module_key: a small record in the
folder "model-keys", ember.runtime.kept), so a later compile finds the model without tracing.

An entry is the model saved as `CompiledModel.save` saves it (ember.runtime.artifact: library,
source, graph and weights, and the manifest of their hashes) in the folder
`<cache_dir>/models/<k[:2]>/<k>`, k the sha256 of the caller's key, Python's version and ember's
own source (ember.runtime.kept), so an entry made by other code is never read. Reading it runs
the artifact's every check; an entry that fails one (a truncated, edited or half-deleted folder)
is a miss, and the next put replaces it. The weights file is the
exception: it is mapped, not read, its size checked but not its hash (hashing BERT-base's 440 MB
would take longer than the rest of a warm compile; the graph's reader checks it, hashed by
xxh3-128 where the xxhash package is installed); a put never writes into an entry's folder
(it writes a new one and renames it into place, and removes old ones by unlinking, which leaves
a mapping valid), so only a file edited in place from outside ember is read as it is, and one
truncated under a running model faults it (SIGBUS). A put saves into a temporary folder renamed into place,
so a reader sees a whole entry or none; a cache that cannot be written is skipped. It saves in a
thread of its own, so that the compile returns the model at once (BERT-base's entry: 415 MB
written and hashed, half a second): the writes and the hashing release the GIL; `get`,
`aliased` (the next compile's first look) and `wait` wait for this process's saves to end, and
so does the interpreter's exit (the thread is not a daemon). The other keys of the entry are
filed once it is in place. An entry is as large as the model's weights, so the folder keeps
at most its share of EMBER_CACHE_LIMIT (4 GiB by default): a hit touches its folder and a put
removes the least recently used entries beyond that, and the temporary folder of a process
killed while saving once it is stale (ember.runtime.disk_cache).

The trust is the build cache's: a hit loads a library of the user's own folder (EMBER_CACHE_DIR).
EMBER_MODEL_CACHE=0 turns it off.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ..errors import ArtifactError, ConfigError
from . import disk_cache, kept
from .artifact import Artifact, read_artifact, save_artifact

FOLDER = "models"
ALIASES = "model-keys"  # ember.runtime.kept's folder of the other keys of entries
TEMPORARY = ".model-"  # the prefix of a save's temporary folder

_saving: list[threading.Thread] = []  # this process's saves that may not have ended
_lock = threading.Lock()


def entry(key: str) -> Path:
    """The folder of `key`'s entry."""
    return kept.entry_path(FOLDER, key, suffix="")


def get(key: str) -> Artifact | None:
    """The model kept under `key`, read and checked; None when there is none or it is damaged."""
    wait()
    folder = entry(key)
    if not folder.is_dir():
        return None
    disk_cache.touch(folder)  # (first: a trim leaves an entry just used to the process reading it)
    try:
        art = read_artifact(folder, mapped=True)
    except (ArtifactError, OSError):
        return None
    return art


def put(key: str, model, aliases: tuple[str, ...] = ()) -> None:
    """Keep `model` (a CompiledModel) under `key`, replacing a damaged entry, and file `aliases`
    as other keys of it, in a thread of its own (see the module doc); nothing when the cache
    cannot be written."""
    paths = entry(key), [kept.entry_path(ALIASES, a) for a in aliases]  # (found now: the cache folder is now's)
    thread = threading.Thread(target=_put, args=(*paths, key, model), name="ember-model-cache")
    thread.start()
    with _lock:
        _saving.append(thread)


def wait() -> None:
    """Return once every save this process began has ended (its entry in place, or given up)."""
    with _lock:
        pending = list(_saving)
    for thread in pending:
        thread.join()
    with _lock:
        _saving[:] = [t for t in _saving if t.is_alive()]


def _put(folder: Path, aliases: list[Path], key: str, model) -> None:
    with contextlib.suppress(OSError, ArtifactError, ConfigError):  # (ConfigError: the build said it first)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=TEMPORARY))
        try:
            save_artifact(model, tmp, needed_only=False, weights_hash=_weights_hash())
            if folder.is_dir():  # (damaged, since get missed it: or another process's, just written)
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        disk_cache.added(folder)
        for path in aliases:
            kept.write(path, key)


def _weights_hash() -> str:
    """xxh3-128 where the xxhash package is installed (BERT-base's 415 MB in 0.02 s, sha256 0.2 s:
    benchmarks/weight_hash.py), else sha256."""
    return "xxh3_128" if importlib.util.find_spec("xxhash") is not None else "sha256"


def alias(other: str, key: str) -> None:
    """File `other` as another key of `key`'s entry."""
    kept.put(ALIASES, other, key)


def aliased(other: str) -> str | None:
    """The key that `other` was filed for, or None."""
    wait()
    key = kept.get(ALIASES, other)
    return key if isinstance(key, str) else None

