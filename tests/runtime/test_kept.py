"""Values kept on disk between processes (ember.runtime.kept): read back whole, a damaged or
foreign entry is a miss, a cache that cannot be written is skipped."""

from __future__ import annotations

import numpy as np
import pytest

from ember.runtime import kept


def test_a_value_comes_back_equal():
    value = {"kernel": (1, 2.5, "c"), "weights": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert kept.get("lowered", "k") is None
    kept.put("lowered", "k", value)
    got = kept.get("lowered", "k")
    assert got["kernel"] == value["kernel"] and np.array_equal(got["weights"], value["weights"])
    assert kept.get("lowered", "other key") is None and kept.get("other folder", "k") is None


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],  # truncated
    lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:],  # a flipped bit
    lambda data: b"",  # empty
])
def test_a_damaged_entry_is_a_miss(damage):
    kept.put("lowered", "k", list(range(100)))
    path = kept.entry_path("lowered", "k")
    path.write_bytes(damage(path.read_bytes()))
    assert kept.get("lowered", "k") is None
    kept.put("lowered", "k", [1, 2])  # written again whole
    assert kept.get("lowered", "k") == [1, 2]


def test_an_entry_whose_digest_matches_but_does_not_unpickle_is_a_miss(cache_dir):
    import hashlib

    payload = b"not a pickle"
    path = kept.entry_path("lowered", "k")
    path.parent.mkdir(parents=True)
    path.write_bytes(hashlib.sha256(payload).digest() + payload)
    assert kept.get("lowered", "k") is None


def test_a_cache_that_cannot_be_written_is_skipped(cache_dir):
    cache_dir.mkdir()
    (cache_dir / "lowered").write_text("a file where the folder would be")  # (root writes read-only folders)
    kept.put("lowered", "k", 1)
    assert kept.get("lowered", "k") is None


def test_other_code_reads_other_entries(monkeypatch):
    kept.put("lowered", "k", 1)
    monkeypatch.setattr(kept, "source_digest", lambda: "another ember")
    assert kept.get("lowered", "k") is None
