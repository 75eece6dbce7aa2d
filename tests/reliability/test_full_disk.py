"""A build cache on a full file system: compiling a model is a ConfigError naming the cache folder
and EMBER_CACHE_DIR, whichever write runs out of space first (the source, the compiler's output,
the library's content-addressed copy), never a raw OSError or a compiler's message alone. The
child runs in a user and mount namespace of its own (`unshare -rm`) with a small tmpfs as its
cache; sizes chosen so that each of the three writes is the one that fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, importable by the child

TIMEOUT = 240

CHILD = """
import ember
from ember.errors import ConfigError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array
g = Graph("mm")
x = g.add_input("x", TensorType((4, 32)))
g.set_outputs([add_op(g, "relu", [add_op(g, "matmul", [x, g.add_constant(random_array((32, 24)), "w")])[0]])[0]])
try:
    ember.compile(g)
except ConfigError as e:
    assert "EMBER_CACHE_DIR" in str(e) and "/cache" in str(e), e
    print("ok")
"""


def _usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _usable(), reason="needs unshare -rm (user and mount namespaces)")
@pytest.mark.parametrize("size", ["2k", "8k", "30k"])
def test_a_full_cache_is_a_config_error(tmp_path, size):
    mount = tmp_path / "small"
    mount.mkdir()
    script = (f"mount -t tmpfs -o size={size} tmpfs {mount} && "
              f"EMBER_CACHE_DIR={mount}/cache exec {sys.executable} -c \"$EMBER_CHILD\"")
    env = {**os.environ, "EMBER_CHILD": CHILD, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: the child ran for more than {TIMEOUT} s")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), \
        f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
