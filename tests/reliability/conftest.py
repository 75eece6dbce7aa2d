"""The reliability suite: ember used the ways people use it, misuse included. A case that could
crash, hang or corrupt the interpreter runs in a child process (`run_python`, the `python`
fixture of tests/conftest.py), so that a signal or a hang is a failed assertion here, never a dead
test run."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty build cache for every test (children inherit it through the environment)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    return path
