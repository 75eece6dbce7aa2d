"""The reliability suite: ember used the ways people use it, misuse included. A case that could
crash, hang or corrupt the interpreter runs in a child process (`run_python`, the `python`
fixture of tests/conftest.py), so that a signal or a hang is a failed assertion here, never a dead
test run. Every test builds into its process's build cache, never the user's; a test about the
cache or a first compile asks for a fresh one (`cache_dir`)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def builds_in_the_worker_cache(in_worker_cache):
    """`in_worker_cache` for every test here (`cache_dir`, when a test asks for it, comes after)."""
