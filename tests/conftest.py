"""Shared test configuration: hypothesis runs derandomized under CI (a failure found there
reproduces exactly), randomized elsewhere (to keep finding new ones); `load_example` imports a
tutorial from examples/ without running it; `python` (`run_python`) runs code in a child process,
for what could crash, hang or leave state in the test process (libgomp's thread settings), and
`gomp_probe` is the source such a child starts with to read those settings. The model cache is
off unless EMBER_MODEL_CACHE says otherwise."""

import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Off for the suite (tests/test_model_cache.py turns it on): its tests compile the same modules
# under patched passes and counters, and each must see its compile run, not a model kept by another.
os.environ.setdefault("EMBER_MODEL_CACHE", "0")


EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"examples.{name}", EXAMPLES / "kernels" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_example():
    """load_example("gemm") is examples/kernels/gemm.py as a module, its main() not run."""
    return _load_example


@pytest.fixture
def examples_dir():
    return EXAMPLES


ROOT = pathlib.Path(__file__).resolve().parents[1]


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

    def assert_ok(self) -> None:
        """The child exited normally and its last line is "ok" (it ran to its end)."""
        assert self.returncode == 0 and self.stdout.strip().endswith("ok"), str(self)


def run_python(code: str | None = None, *, args: tuple[str, ...] = (), stdin: str | None = None,
               cwd: str | pathlib.Path | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
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


@pytest.fixture(scope="session")
def worker_cache(tmp_path_factory):
    """One build cache per test process, shared by the tests that use it (`in_worker_cache`): most
    compile small kernels that the tests before them compiled already, and a compile is seconds."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def in_worker_cache(worker_cache, monkeypatch):
    """EMBER_CACHE_DIR is `worker_cache` for the test and the children it starts."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(worker_cache))
    return worker_cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty build cache of the test's own (children inherit it through the environment),
    for a test about the cache itself (damage, trimming, races) or about a first compile."""
    path = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    return path


@pytest.fixture
def python():
    """run_python, as a fixture."""
    return run_python


GOMP_PROBE = """
import ctypes, os
import torch

gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)  # the process's one libgomp (torch's)
tasks = lambda: len(os.listdir("/proc/self/task"))  # libgomp keeps the workers of a thread's largest team

def setting():  # the calling thread's OpenMP setting, as libgomp and torch see it
    omp = gomp.omp_get_max_threads()  # first: torch's first call on a thread sets torch's own there
    assert torch.get_num_threads() == omp, (torch.get_num_threads(), omp)
    return omp
"""


@pytest.fixture
def gomp_probe():
    """Source that a child (`python`) runs first: `gomp` (torch's libgomp), `tasks()` (the
    process's threads) and `setting()` (the calling thread's thread count, libgomp's and torch's)."""
    return GOMP_PROBE
