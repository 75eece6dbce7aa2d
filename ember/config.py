"""Every option of ember, declared once: name, default, environment variable, description.

Read an option with `config.get("cc")`; the environment variable, when set, overrides the
default. Options that change generated code (`cc`, `cflags`) are part of the build cache key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Option:
    name: str
    default: object
    env: str
    description: str
    kind: type = str


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "ember")


OPTIONS = {
    o.name: o
    for o in [
        Option("cache_dir", _default_cache_dir(), "EMBER_CACHE_DIR", "where compiled kernels are cached"),
        Option("cc", "cc", "EMBER_CC", "the C compiler"),
        # -fno-tree-loop-if-convert: GCC 12 at -O3 with AVX-512 miscompiles guarded loops that it
        # if-converts and vectorizes with masks (tests/te: test_rowsum_rfactor_empty_ranges);
        # ember vectorizes explicitly, so little is lost
        Option("cflags", "-O3 -march=native -fno-tree-loop-if-convert -fopenmp -shared -fPIC -std=gnu11",
               "EMBER_CFLAGS", "flags passed to the C compiler"),
        Option("num_threads", 0, "EMBER_NUM_THREADS", "OpenMP threads per kernel call (0: all cores)", int),
        Option("print_lower", False, "EMBER_PRINT_LOWER", "print the loop IR after every lowering pass",
               bool),
        Option("print_ir", "", "EMBER_PRINT_IR",
               "graph passes after which to print the graph to stderr: comma-separated names, or all"),
        Option("disable_passes", "", "EMBER_DISABLE_PASSES", "graph passes to skip: comma-separated names"),
        Option("checked", False, "EMBER_CHECKED", "integer division by zero raises ZeroDivisionError (else 0)", bool),
        Option("keep_source", True, "EMBER_KEEP_SOURCE", "keep the generated C next to the cached library",
               bool),
    ]
}


def get(name: str):
    opt = OPTIONS[name]
    raw = os.environ.get(opt.env)
    if raw is None:
        return opt.default
    if opt.kind is bool:
        return raw.strip().lower() not in ("", "0", "false", "no", "off")
    return opt.kind(raw)
