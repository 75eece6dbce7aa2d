"""The build cache (keys, hits, atomic files, locks) and compiler errors."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from ember.codegen.c import codegen_c
from ember.errors import BuildError
from ember.runtime import build
from ember.runtime.build import build_library, explain_cache_key
from ember.runtime.module import build_c

SOURCE = "int twice(int x) { return 2 * x; }\n"
BROKEN = """int ok(int x) {
  return x;
}
int broken(int x) {
  int y = x + ;
  return y;
}
"""


def test_library_goes_to_a_sharded_cache_path(cache_dir):
    path = build_library(SOURCE)
    key = explain_cache_key(SOURCE)["key"]
    assert path == cache_dir / "kernels" / key[:2] / f"{key}.so"
    assert path.read_bytes()[:4] == b"\x7fELF"
    assert path.with_suffix(".c").read_text() == SOURCE  # keep_source is on by default
    assert not list(path.parent.glob(".build-*"))  # the temporary build folder is gone


def test_cache_hit_runs_no_compiler(monkeypatch):
    path = build_library(SOURCE)

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"the compiler ran: {args}")

    monkeypatch.setattr(build.subprocess, "run", no_compiler)
    assert build_library(SOURCE) == path


def test_keep_source_off(cache_dir, monkeypatch):
    monkeypatch.setenv("EMBER_KEEP_SOURCE", "0")
    path = build_library(SOURCE)
    assert path.exists() and not path.with_suffix(".c").exists()


def test_key_names_what_differs(monkeypatch):
    base = explain_cache_key(SOURCE)
    flags = explain_cache_key(SOURCE, cflags="-O2 -shared -fPIC")
    assert base["key"] != flags["key"]
    assert {k for k in base if base[k] != flags[k]} == {"cflags", "key", "path"}
    monkeypatch.setattr(build, "compiler_version", lambda cc: "cc 99.0")
    newer = explain_cache_key(SOURCE)
    assert {k for k in base if base[k] != newer[k]} == {"compiler_version", "key", "path"}
    assert explain_cache_key(SOURCE + " ")["source_sha256"] != base["source_sha256"]


def test_compiler_error_shows_the_offending_source_line(cache_dir):
    with pytest.raises(BuildError) as info:
        build_library(BROKEN)
    msg = str(info.value)
    assert "the C compiler failed (exit status 1)" in msg
    assert ":5:" in msg and "error: expected expression" in msg
    assert ">     5 |   int y = x + ;" in msg
    assert "      4 | int broken(int x) {" in msg and "      6 |   return y;" in msg
    assert info.value.source == BROKEN and "error" in info.value.compiler_output
    assert not list(cache_dir.rglob("*.so")) and not list(cache_dir.rglob(".build-*"))


def test_bad_flag_shows_what_the_compiler_said():
    with pytest.raises(BuildError, match="no-such-option"):
        build_library(SOURCE, cflags="-shared -fPIC -fno-such-option")


def test_missing_compiler_says_how_to_choose_one():
    with pytest.raises(BuildError, match="EMBER_CC"):
        build_library(SOURCE, cc="/nonexistent/bin/cc")


def test_concurrent_builds_compile_once(cache_dir, monkeypatch):
    compiles = []
    run = build.run_compilers

    def counting_run(cmds, *args, **kwargs):
        compiles.extend(cmds)
        return run(cmds, *args, **kwargs)

    build.compiler_version(build.explain_cache_key(SOURCE)["cc"])  # asked before the threads start
    monkeypatch.setattr(build, "run_compilers", counting_run)
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(build_library(SOURCE))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compiles) == 1 and len(set(paths)) == 1 and len(paths) == 4


def _has_avx() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and " avx" in cpuinfo.read_text()


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")
@pytest.mark.skipif(not _has_avx(), reason="needs a CPU with AVX (ymm registers)")
def test_vectorized_kernel_uses_vector_registers(vscale):
    source = codegen_c(vscale)
    kernel = build_c(vscale)
    path = build_library(source)
    assert kernel.source == source
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True, check=True).stdout
    body = out.split("<vscale>:")[1].split("\n\n")[0]
    assert "%ymm" in body or "%zmm" in body, body


def test_units_are_compiled_apart_and_linked_into_one_library(cache_dir):
    import ctypes

    units = ["int twice(int x) { return 2 * x; }\n",
             "int twice(int x);\nint quadruple(int x) { return twice(twice(x)); }\n"]
    path = build_library(build.UNIT_SEPARATOR.join(units))
    lib = ctypes.CDLL(str(path))
    assert lib.quadruple(5) == 20 and lib.twice(-3) == -6
    assert path.with_suffix(".c").read_text() == build.UNIT_SEPARATOR.join(units)


def test_an_error_in_a_unit_shows_that_units_lines():
    with pytest.raises(BuildError) as e:
        build_library(build.UNIT_SEPARATOR.join([SOURCE, BROKEN]))
    assert ">     5 |   int y = x + ;" in str(e.value) and "_1.c:5:" in str(e.value)
