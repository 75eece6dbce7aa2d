"""Compiled models kept whole between processes, by key: a compile that another process made
before, from the same traced program, weights, options and target, loads that model instead of
converting, passing, lowering and building it again (ember.compile of a torch module).

    get(key) -> Artifact, or None       put(key, model)
    alias(other, key)                   aliased(other) -> key, or None

A key is the traced program's (ember.frontend.torch.digest); `alias` files another key for the
same entry (the module's key before tracing, ember.frontend.module_key: a small record in the
folder "model-keys", ember.runtime.kept), so a later compile finds the model without tracing.

An entry is the model saved as `CompiledModel.save` saves it (ember.runtime.artifact: library,
source, graph and weights, and the manifest of their sha256s) in the folder
`<cache_dir>/models/<k[:2]>/<k>`, k the sha256 of the caller's key, Python's version and ember's
own source (ember.runtime.kept), so an entry made by other code is never read. Reading it runs
the artifact's every check; an entry that fails one (a truncated, edited or half-deleted folder)
is a miss, and the next put replaces it. The weights file is the
exception: it is mapped, not read, its size checked but not its sha256 (hashing BERT-base's 440 MB
would take longer than the rest of a warm compile); a put never writes into an entry's folder
(it writes a new one and renames it into place, and removes old ones by unlinking, which leaves
a mapping valid), so only a file edited in place from outside ember is read as it is, and one
truncated under a running model faults it (SIGBUS). A put saves into a temporary folder renamed into place,
so a reader sees a whole entry or none; a cache that cannot be written is skipped. An entry is as
large as the model's weights, so the folder keeps at most LIMIT bytes: a put removes the least
recently used entries (a hit touches its folder) beyond that.

The trust is the build cache's: a hit loads a library of the user's own folder (EMBER_CACHE_DIR).
EMBER_MODEL_CACHE=0 turns it off.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ArtifactError
from . import kept
from .artifact import Artifact, read_artifact, save_artifact

FOLDER = "models"
ALIASES = "model-keys"  # ember.runtime.kept's folder of the other keys of entries
LIMIT = 4 << 30  # bytes of entries kept at most (BERT-base's is 0.4 GiB)


def entry(key: str) -> Path:
    """The folder of `key`'s entry."""
    return kept.entry_path(FOLDER, key, suffix="")


def get(key: str) -> Artifact | None:
    """The model kept under `key`, read and checked; None when there is none or it is damaged."""
    folder = entry(key)
    if not folder.is_dir():
        return None
    try:
        art = read_artifact(folder, mapped=True)
    except (ArtifactError, OSError):
        return None
    with contextlib.suppress(OSError):
        os.utime(folder)  # (recently used: the last to be removed)
    return art


def put(key: str, model) -> None:
    """Keep `model` (a CompiledModel) under `key`, replacing a damaged entry; nothing when the
    cache cannot be written."""
    folder = entry(key)
    with contextlib.suppress(OSError, ArtifactError):
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".model-"))
        try:
            save_artifact(model, tmp, needed_only=False)
            if folder.is_dir():  # (damaged, since get missed it: or another process's, just written)
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _evict(folder.parent.parent, folder)


def alias(other: str, key: str) -> None:
    """File `other` as another key of `key`'s entry."""
    kept.put(ALIASES, other, key)


def aliased(other: str) -> str | None:
    """The key that `other` was filed for, or None."""
    key = kept.get(ALIASES, other)
    return key if isinstance(key, str) else None


def _evict(root: Path, keep: Path) -> None:
    """Remove the least recently used entries under `root` until they hold at most LIMIT bytes,
    `keep` (the entry just written) aside."""
    entries = []
    for e in root.glob("*/*"):
        if e.is_dir() and not e.name.startswith("."):
            entries.append((e.stat().st_mtime, sum(f.stat().st_size for f in e.rglob("*") if f.is_file()), e))
    total = sum(size for _, size, _ in entries)
    for _, size, e in sorted(entries):
        if total <= LIMIT:
            break
        if e != keep:
            shutil.rmtree(e, ignore_errors=True)
            total -= size
