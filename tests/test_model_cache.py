"""The model cache (ember.runtime.model_cache): a torch module compiled again with the same
program, weights and options loads the model kept whole, and computes as torch does, found by
the module's key without tracing (or by its trace, with a hook or cache="trace"); a changed
weight, option or ember source misses; the report's phases add up to the compile's time; a
damaged entry is a miss that the next compile replaces; the folder keeps at most its limit, the
least recently used entries removed first; EMBER_MODEL_CACHE=0 keeps nothing (and the compile
report says why a module was traced by torch.export); an entry saved in the background is not
seen before it is whole, and a process that exits right after a put leaves it whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ember  # noqa: E402
from ember.compile_stats import Clock  # noqa: E402
from ember.runtime import disk_cache, kept, model_cache  # noqa: E402

RTOL, ATOL = 1e-5, 1e-5


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(12, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).softmax(-1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache folder of this module's own (its path), the model cache on, and a module with its
    input."""
    root = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CACHE_DIR", str(root))
        mp.setenv("EMBER_MODEL_CACHE", "1")
        torch.manual_seed(0)
        yield root, Net().eval(), torch.randn(3, 12)


def compiled(model, x, **options):
    """ember.compile of the module, checked against torch on a fresh input."""
    cm = ember.compile(model, (x,), **options)
    y = torch.randn_like(x)
    with torch.no_grad():
        np.testing.assert_allclose(cm(y.numpy()), model(y).numpy(), rtol=RTOL, atol=ATOL)
    return cm


def phases_sum_to_the_total(model, x) -> ember.CompiledModel:
    """A compile whose report's phases (wall and CPU seconds) add up to about what it took."""
    clock = Clock()
    cm = ember.compile(model, (x,))
    wall, cpu = clock.lap()
    compiled(model, x)  # (checked against torch: a hit again)
    s = cm.stats
    phases = (s.import_s, s.load_s) if s.hit else \
        (s.import_s, s.passes_s, s.lower_s, s.codegen_s, s.build_s, s.load_s, s.kept_s)
    # the phases cover the compile but for its bookkeeping (slack for a loaded machine's pauses)
    assert sum(phases) == pytest.approx(s.total_s) and 0.5 * wall - 0.2 <= s.total_s <= wall
    assert set(s.cpu) == ({"import", "load"} if s.hit else
                          {"import", "passes", "lowering", "codegen", "C compiler", "load", "kept"})
    assert 0 < sum(s.cpu.values()) <= cpu and f"({sum(s.cpu.values()):.2f} s of CPU)" in cm.compile_report()
    return cm


def mapped_file(address: int) -> str:
    """The file whose mapping holds `address` in this process ("" for none): /proc/self/maps."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, _, _, _, _, *path = line.split(maxsplit=5)
        start, end = (int(a, 16) for a in span.split("-"))
        if start <= address < end:
            return path[0] if path else ""
    return ""


def entries(root) -> list:
    """The entries in place once this process's saves have ended."""
    model_cache.wait()
    return sorted(e for e in (root / model_cache.FOLDER).glob("*/*") if not e.name.startswith("."))


def test_hit_and_misses(cache, monkeypatch):
    root, model, x = cache
    first = phases_sum_to_the_total(model, x)
    assert not first.stats.hit and first.stats.kept_s > 0 and first.stats.exported == ""  # (recorded)
    again = phases_sum_to_the_total(model, x)
    assert again.stats.hit and again.stats.lowered == 0
    assert "from the model cache" in again.compile_report()
    assert again.spec == first.spec and again.graph is not None  # (its graph read from the entry)
    align = again.plan.align  # the weights, aligned, are views of the entry's bytes as read: not copied again
    assert all(w.ctypes.data % align == 0 for w in again.weights.values())
    assert any(w.base is not None for w in again.weights.values())
    assert not compiled(model, x, disabled_passes=("cse",)).stats.hit  # another option (the same C)
    assert compiled(model, x, num_threads=1).stats.hit  # threads change no code
    with torch.no_grad():
        model.fc2.weight[3, 5] += 1e-3  # one weight changed
    changed = compiled(model, x)
    assert not changed.stats.hit
    monkeypatch.setattr(kept, "source_digest", lambda: "another ember")
    assert not compiled(model, x).stats.hit
    assert len(entries(root)) == 4
    monkeypatch.setenv("EMBER_CACHE_LIMIT", "1")  # the least recently used go first, the new entry stays
    monkeypatch.setattr(disk_cache, "YOUNG_S", -1.0)  # (however recently used)
    assert not compiled(model, x, name="last").stats.hit
    assert len(entries(root)) == 1 and compiled(model, x, name="last").stats.hit


def test_damaged_entry_is_a_miss_and_replaced(cache):
    root, model, x = cache
    compiled(model, x, name="damaged")
    (entry,) = [e for e in entries(root) if '"name": "damaged"' in (e / "manifest.json").read_text()]
    weights = entry / "graph" / "constants.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])  # truncated
    assert not compiled(model, x, name="damaged").stats.hit  # (a miss, compiled and kept again)
    assert compiled(model, x, name="damaged").stats.hit


def test_found_before_tracing(cache, monkeypatch):
    """A module compiled again is found by its key before tracing (torch.export never runs); one
    whose key changed but not its program is found by its trace, and by its key after that; a
    hook or cache="trace" keys it by its trace."""
    from ember.frontend.torch import module as frontend

    root, _, x = cache
    torch.manual_seed(2)
    model = Net().eval()
    first = compiled(model, x)
    assert not first.stats.hit and not first.stats.unkeyed
    traced = frontend.trace

    def no_trace(*args, **kwargs):
        raise AssertionError("traced")

    monkeypatch.setattr(frontend, "trace", no_trace)
    again = compiled(model, x)
    assert again.stats.hit and again.stats.untraced and "nothing traced" in again.compile_report()
    for w in again.weights.values():  # views of the entry's mapped pages, aligned as they lie
        assert w.ctypes.data % again.plan.align == 0 and mapped_file(w.ctypes.data).endswith("constants.safetensors")
    y = torch.randn_like(x).numpy()
    np.testing.assert_array_equal(again(y), first(y))  # the very model the first compile made
    monkeypatch.setattr(frontend, "trace", traced)
    assert compiled(model, x, cache="trace").stats.hit and not compiled(model, x, cache="trace").stats.untraced
    model.note = "unread"  # another key, the same program: found by its trace, then by its key
    assert not compiled(model, x).stats.untraced and compiled(model, x).stats.untraced
    handle = model.fc1.register_forward_hook(lambda m, args, out: out)
    hooked = compiled(model, x)
    handle.remove()
    assert hooked.stats.hit and "no key before tracing: module fc1 (Linear) has forward hooks" in \
        hooked.compile_report()
    with pytest.raises(ember.ArgumentTypeError, match="cache is 'module' or 'trace'"):
        ember.compile(model, (x,), cache="never")


def test_off(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_MODEL_CACHE", "0")
    monkeypatch.setenv("EMBER_RECORD_TRACE", "0")
    torch.manual_seed(1)
    cm = compiled(Net().eval(), torch.randn(2, 12))
    assert entries(tmp_path) == []
    assert "(traced by torch.export, not recorded: EMBER_RECORD_TRACE is off)" in cm.compile_report()


def test_saved_in_the_background(cache, monkeypatch):
    """A save under way shows nothing (no entry, no other key) until its entry is whole; a
    compile's first look waits for it."""
    root, _, x = cache
    torch.manual_seed(4)
    model = Net().eval()
    started, go = threading.Event(), threading.Event()
    save = model_cache.save_artifact

    def slow(*args, **kwargs):
        folder = save(*args, **kwargs)  # (written whole, not yet renamed into place)
        started.set()
        go.wait(timeout=60)
        return folder

    monkeypatch.setattr(model_cache, "save_artifact", slow)
    before = set((root / model_cache.FOLDER).glob("*/*")), set((root / model_cache.ALIASES).rglob("*"))
    first = compiled(model, x, name="background")
    assert started.wait(timeout=60)
    made = set((root / model_cache.FOLDER).glob("*/*")) - before[0]
    assert [e.name.startswith(model_cache.TEMPORARY) for e in made] == [True]  # (only its temporary folder)
    assert set((root / model_cache.ALIASES).rglob("*")) == before[1]  # (its module's key not filed yet)
    go.set()
    again = compiled(model, x, name="background")  # (its module key's look waited for the save)
    assert again.stats.hit and again.stats.untraced
    y = torch.randn_like(x).numpy()
    np.testing.assert_array_equal(again(y), first(y))


def test_a_process_exiting_after_a_put_leaves_its_entry_whole(cache, tmp_path):
    """A process that puts a model and exits at once (its save still under way) leaves the whole
    entry, which this process then reads and runs as the model it saved."""
    root, model, x = cache
    cm = compiled(model, x, name="exiting")
    cm.save(tmp_path / "saved")
    script = ("import sys, ember; from ember.runtime import model_cache; "
              "model_cache.put(sys.argv[2], ember.load(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "saved"), "put by a process that exits"],
                   check=True, cwd=Path(__file__).resolve().parents[1],
                   env={**os.environ, "EMBER_CACHE_DIR": str(root), "EMBER_MODEL_CACHE": "1"})
    entry = model_cache.entry("put by a process that exits")
    y = torch.randn_like(x).numpy()  # (ember.load checks every file's sha256: the entry is whole)
    np.testing.assert_array_equal(ember.load(entry)(y), cm(y))


def test_weights_hashed_by_xxh3(cache):
    """An entry's weights are recorded by their xxh3-128 (where xxhash is installed), which a
    full load checks: one bit changed is an error that names it."""
    pytest.importorskip("xxhash")
    root, model, x = cache
    compiled(model, x, name="xxh3")
    (entry,) = [e for e in entries(root) if '"name": "xxh3"' in (e / "manifest.json").read_text()]
    record = json.loads((entry / "manifest.json").read_text())["files"]["weights"]
    assert set(record) == {"path", "size", "xxh3_128"}
    y = torch.randn_like(x).numpy()
    np.testing.assert_array_equal(ember.load(entry)(y), compiled(model, x, name="xxh3")(y))
    with open(entry / record["path"], "r+b") as f:  # (in place, not truncated: the hit above maps it)
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 1]))
    with pytest.raises(ember.ArtifactError, match="has xxh3_128"):
        ember.load(entry)
