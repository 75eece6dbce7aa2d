"""The cache directory's bound (ember.runtime.disk_cache): EMBER_CACHE_LIMIT split among the
caches, the least recently used entries removed first (a touched one stays, the one just put
stays, an entry's files go together), entries used just now and writes under way kept, a killed
process's stale temporaries removed, a put that scans only past the limit, two processes putting
and trimming at once never corrupting a reader, and `ember cache` showing and clearing it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ember.cli import main
from ember.errors import ConfigError
from ember.runtime import disk_cache, kept
from ember.runtime.build import build_library
from ember.runtime.library import open_library

ROOT = Path(__file__).resolve().parents[2]
BUDGET = sum(disk_cache.SHARES.values())  # EMBER_CACHE_LIMIT giving a share of 1 byte


def entry(cache_dir: Path, key: str, age_s: float, size: int = 100) -> Path:
    """A build-cache entry (a library and its sidecar) of `size` bytes last used `age_s` ago."""
    lib = cache_dir / "kernels" / key[:2] / f"{key}.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(os.urandom(size - 10))
    lib.with_suffix(".json").write_bytes(b"0123456789")
    for path in (lib, lib.with_suffix(".json")):
        os.utime(path, (time.time() - age_s,) * 2)
    return lib


def kernels_limit(monkeypatch, nbytes: int) -> None:
    """EMBER_CACHE_LIMIT such that the kernels' share is `nbytes`."""
    monkeypatch.setenv("EMBER_CACHE_LIMIT", str(nbytes * BUDGET // disk_cache.SHARES["kernels"]))
    assert disk_cache.limit("kernels") == nbytes


def test_the_limit_is_split_among_the_caches(monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_LIMIT", "2G")
    assert disk_cache.limit("models") == 1 << 30 and disk_cache.limit("kernels") == 256 << 20
    assert sum(disk_cache.limit(name) for name in disk_cache.SHARES) == 2 << 30
    monkeypatch.setenv("EMBER_CACHE_LIMIT", "1.5 MiB")
    assert disk_cache.limit("models") == 768 << 10
    monkeypatch.delenv("EMBER_CACHE_LIMIT")
    assert disk_cache.limit("models") == 4 << 30  # (the default: 8 GiB in all)


@pytest.mark.parametrize("value", ["lots", "-1G", "2X", "1e9", "G"])
def test_a_bad_limit_is_a_config_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("EMBER_CACHE_LIMIT", value)
    with pytest.raises(ConfigError, match=r"EMBER_CACHE_LIMIT=.*not a size; allowed: a size in bytes"):
        disk_cache.limit("kernels")


def test_least_recently_used_go_first(cache_dir, monkeypatch):
    """Past the limit, the oldest go until LOW_WATER of it is left; a touched entry counts as
    new, the one just put stays, and an entry's library and sidecar go together."""
    libs = [entry(cache_dir, f"{k:02x}{k}", age_s=1000 - k * 100) for k in range(5)]  # oldest first
    disk_cache.touch(libs[0])  # (used now: the newest)
    monkeypatch.setattr(disk_cache, "YOUNG_S", -1.0)
    kernels_limit(monkeypatch, 350)
    new = entry(cache_dir, "ff0", age_s=0)
    disk_cache.added(new, 100)  # 600 bytes: down to 315 at most
    left = sorted(p.name for p in (cache_dir / "kernels").glob("*/*"))
    assert left == sorted(f"{p.stem}{suffix}" for p in (libs[0], libs[4], new) for suffix in (".json", ".so"))
    assert disk_cache.usage("kernels") == disk_cache.Usage(300, 3)
    assert (cache_dir / "kernels" / disk_cache.INDEX).read_text().split()[:2] == ["300", "0"]


def test_entries_used_just_now_and_writes_under_way_stay(cache_dir, monkeypatch):
    young = entry(cache_dir, "aa1", age_s=10)
    old = entry(cache_dir, "bb1", age_s=1000)
    writing = cache_dir / "kernels" / "cc" / ".build-123"  # a compile under way
    stale = cache_dir / "kernels" / "cc" / ".build-456"  # a killed process's
    for folder, age in ((writing, 10), (stale, disk_cache.STALE_S + 10)):
        folder.mkdir(parents=True)
        (folder / "lib.so").write_bytes(b"x" * 50)
        os.utime(folder, (time.time() - age,) * 2)
    kernels_limit(monkeypatch, 10)
    disk_cache.added(entry(cache_dir, "dd1", age_s=0), 100)
    assert young.exists() and not old.exists() and writing.exists() and not stale.exists()


def test_a_put_scans_only_past_the_limit(cache_dir, monkeypatch):
    scans = []
    entries = disk_cache._entries
    monkeypatch.setattr(disk_cache, "_entries", lambda *a, **kw: scans.append(1) or entries(*a, **kw))
    kernels_limit(monkeypatch, 1000)
    for k in range(8):  # 800 bytes: the first put scans (no running total yet), the others add
        disk_cache.added(entry(cache_dir, f"{k:02x}{k}", age_s=0), 100)
    assert len(scans) == 1
    assert (cache_dir / "kernels" / disk_cache.INDEX).read_text().split()[:2] == ["800", "7"]
    disk_cache.added(entry(cache_dir, "ee0", age_s=0), 300)  # past it
    assert len(scans) == 2
    assert disk_cache.usage("kernels").entries == 9  # (all used just now: none removed)


def test_a_damaged_running_total_is_counted_again(cache_dir, monkeypatch):
    kernels_limit(monkeypatch, 1000)
    disk_cache.added(entry(cache_dir, "aa1", age_s=0), 100)
    index = cache_dir / "kernels" / disk_cache.INDEX
    index.write_text("not a total, and longer than the record " * 3)
    disk_cache.added(entry(cache_dir, "bb1", age_s=0), 100)  # (scans: 200 bytes)
    assert index.read_text().split()[:2] == ["200", "0"] and len(index.read_bytes()) < 64


def test_hits_and_puts_of_every_cache_go_through_it(cache_dir):
    """kept (lowered kernels, model keys), the build cache (and NVRTC's, through the same
    install) and the libraries loaded by content count their puts and touch their hits."""
    kept.put("lowered", "k", list(range(10)))
    path = kept.entry_path("lowered", "k")
    os.utime(path, (1, 1))
    assert kept.get("lowered", "k") == list(range(10)) and path.stat().st_mtime > time.time() - 60
    lib = build_library("int one(void) { return 1; }\n")
    copy = open_library(lib).path
    for p in (lib, copy):
        os.utime(p, (1, 1))
    assert build_library("int one(void) { return 1; }\n") == lib and open_library(lib).path == copy
    for name, p in (("lowered", path), ("kernels", lib), ("libraries", copy)):
        assert p.stat().st_mtime > time.time() - 60  # (touched by the hit)
        counted = (cache_dir / name / disk_cache.INDEX).read_text().split()[0]
        assert int(counted) == disk_cache.usage(name).bytes > 0 and disk_cache.usage(name).entries == 1


WRITER = """
import sys
from ember.runtime import disk_cache, kept
from ember.runtime.build import build_library
from ember.runtime.library import open_library
disk_cache.YOUNG_S = -1.0
for k in range(int(sys.argv[1])):
    kept.put("lowered", f"w{k % 20}", [k % 20] * 200)
print("ok")
"""


def test_two_processes_putting_and_trimming_never_corrupt_a_reader(cache_dir, monkeypatch):
    """Another process puts and trims (a limit of a few entries, none kept for being young)
    while this one does the same and reads: every read is a whole value or a miss."""
    monkeypatch.setenv("EMBER_CACHE_LIMIT", str(3000 * BUDGET // disk_cache.SHARES["lowered"]))
    monkeypatch.setattr(disk_cache, "YOUNG_S", -1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, "400"], env=env, stdout=subprocess.PIPE, text=True)
    hits = 0
    try:
        while writer.poll() is None or hits == 0:
            for k in range(20):
                kept.put("lowered", f"r{k}", [k] * 200)
                for key, value in ((f"r{k}", k), (f"w{k}", k)):
                    got = kept.get("lowered", key)
                    assert got is None or got == [value] * 200
                    hits += got is not None
    finally:
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0 and out.strip() == "ok"
    assert disk_cache.usage("lowered").bytes < 2 * 3000  # (trimmed: 40 entries of about 450 bytes were put)


def test_ember_cache_shows_and_clears(cache_dir, capsys):
    kept.put("lowered", "k", 1)
    entry(cache_dir, "ab1", age_s=0)
    nbytes = 100 + kept.entry_path("lowered", "k").stat().st_size
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{cache_dir} (EMBER_CACHE_DIR), at most 8.0 GiB (EMBER_CACHE_LIMIT)\n")
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()[1:]}
    assert list(rows) == [*disk_cache.SHARES, "all"]
    assert rows["kernels"] == "100 B in 1 entries, at most 1.0 GiB"
    assert rows["models"] == "0 B in 0 entries, at most 4.0 GiB"
    assert main(["cache", "--clear"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed {nbytes} B from {cache_dir}\n")
    assert out.endswith("  all                0 B in      0 entries\n")
    assert kept.get("lowered", "k") is None
