"""What a cache put costs the thread that puts (a compile's) when its folder is due a scan
(ember.runtime.disk_cache: past the limit, every RESCAN_PUTS puts, or once an hour): a folder of
--entries build-cache entries (a library and its sidecar each, --bytes bytes) in a temporary
EMBER_CACHE_DIR, the running total removed so that the put scans. Printed: the put's wall and
CPU time (time.thread_time: the putting thread's own), the least over --runs runs, and the
time until the scan is over (disk_cache.wait).

    python benchmarks/cache_trim.py [--entries 20000] [--bytes 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def fill(folder: Path, entries: int, nbytes: int) -> None:
    for k in range(entries):
        key = f"{k:064x}"[::-1]
        shard = folder / key[:2]
        shard.mkdir(exist_ok=True)
        (shard / f"{key}.so").write_bytes(b"x" * nbytes)
        (shard / f"{key}.json").write_bytes(b"{}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--bytes", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ember-cache-trim-") as tmp:
        os.environ["EMBER_CACHE_DIR"] = tmp
        from ember.runtime import disk_cache

        folder = disk_cache.root("kernels")
        folder.mkdir(parents=True)
        fill(folder, args.entries, args.bytes)
        best = (float("inf"), float("inf"), float("inf"))
        for run in range(args.runs):
            (folder / disk_cache.INDEX).unlink(missing_ok=True)  # (no running total: the put scans)
            path = folder / "ff" / f"ff{run:062x}.so"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"x" * args.bytes)
            wall, cpu = time.perf_counter(), time.thread_time()
            disk_cache.added(path, args.bytes)
            put = (time.perf_counter() - wall, time.thread_time() - cpu)
            disk_cache.wait()
            best = min(best, (*put, time.perf_counter() - wall))
        print(f"{args.entries} entries: a put that scans {best[0] * 1e3:.2f} ms wall, {best[1] * 1e3:.2f} ms of its "
              f"thread's CPU; the scan over after {best[2] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
