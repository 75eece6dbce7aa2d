"""The reliability suite: ember used the ways people use it, misuse included. A case that could
crash, hang or corrupt the interpreter runs in a child process (`run_python`), so that a signal or
a hang is a failed assertion here, never a dead test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str

    @property
    def signal(self) -> str | None:
        """The signal that killed the child ('SIGSEGV', ...), or None when it exited."""
        return signal.Signals(-self.returncode).name if self.returncode < 0 else None

    def __str__(self):
        return f"exit {self.returncode} ({self.signal})\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_python(code: str | None = None, *, args: tuple[str, ...] = (), stdin: str | None = None,
               cwd: str | Path | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    """Run `python -c code` (or `python *args` when code is None) in a child process with ember
    importable; a child still running after `timeout` seconds fails the test as a hang."""
    argv = [sys.executable, *(("-c", textwrap.dedent(code)) if code is not None else ()), *args]
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), child_env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, env=child_env,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang: the child ran for more than {timeout} s\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def python():
    """run_python, as a fixture."""
    return run_python


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty build cache for every test (children inherit it through the environment)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    return path
