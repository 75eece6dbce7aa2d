"""Tuning databases the ways they are found on disk: not a database, truncated, another
program's SQLite file, in a folder that does not exist, locked by another process, or a file
ember may not write. Each is an ArtifactError naming the file and what is wrong (never a raw
sqlite3 error), and a file ember may not write still opens for lookups. Each case runs in a child
process with a timeout (a lock must not wait forever)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess

import pytest

TIMEOUT = 120

# a database with one workload and one record, its best trace known
SETUP = """
import sys
from ember import te
from ember.errors import ArtifactError
from ember.tune import Database, MeasureResult, task_from_tensors
import ember.tune.database as database

TARGET = "c | test CPU | avx2"
A, B = te.placeholder((32, 32), name="A"), te.placeholder((32, 32), name="B")
k = te.reduce_axis((0, 32), name="k")
task = task_from_tensors([A, B, te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")], "mm")

def fill(path):
    with Database(path) as db:
        db.commit_workload(task, TARGET)
        db.add(task.key, TARGET, task.schedule().trace, MeasureResult((1e-4, 1.2e-4)))

def refused(path, *match, **options):
    try:
        with Database(path, **options) as db:
            db.schedules(TARGET)
    except ArtifactError as e:
        assert str(path) in str(e) and all(m in str(e) for m in match), e
        return
    raise AssertionError(f"{path} opened")
"""


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "tuning.db"


def test_damaged_and_foreign_files(python, db_path, tmp_path):
    code = SETUP + f"""
from pathlib import Path
good = Path({str(db_path)!r})
fill(good)
(Path({str(tmp_path)!r}) / "noise.db").write_bytes(bytes(range(256)) * 64)
refused(Path({str(tmp_path)!r}) / "noise.db", "not an SQLite database")
data = good.read_bytes()
half = good.with_name("half.db")
half.write_bytes(data[: len(data) // 2])
refused(half, "damaged")
refused(Path({str(tmp_path)!r}) / "foreign.db", "not an ember tuning database")
refused(Path({str(tmp_path)!r}) / "no" / "such" / "folder" / "tuning.db", "does not exist")
with Database(good) as db:  # the intact file still works
    assert db.schedules(TARGET).traces
print("ok")
"""
    with sqlite3.connect(tmp_path / "foreign.db") as conn:  # another program's file
        conn.execute("CREATE TABLE records (name TEXT, score REAL)")
        conn.execute("INSERT INTO records VALUES ('a', 1.0)")
    python(code, timeout=TIMEOUT).assert_ok()


def test_a_locked_database(python, db_path):
    code = SETUP + f"""
import sqlite3
fill({str(db_path)!r})
holder = sqlite3.connect({str(db_path)!r}, isolation_level=None)
holder.execute("BEGIN EXCLUSIVE")
database.BUSY_TIMEOUT_S = 0.2
refused({str(db_path)!r}, "lock")
holder.execute("ROLLBACK")
with Database({str(db_path)!r}) as db:
    assert db.schedules(TARGET).traces
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


@pytest.mark.skipif(shutil.which("chattr") is None, reason="makes the file immutable with chattr")
def test_a_database_ember_cannot_write_opens_for_lookups(python, db_path):
    """The file and its folder immutable (read-only for root too): lookups work, adding is refused."""
    run = python(SETUP + f"fill({str(db_path)!r})\nprint('ok')\n", timeout=TIMEOUT)
    run.assert_ok()
    assert not [p for p in db_path.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]  # closed: one file
    code = SETUP + f"""
with Database({str(db_path)!r}) as db:
    assert db.readonly and db.schedules(TARGET).traces and len(db) == 1
    try:
        db.add(task.key, TARGET, task.schedule().trace, MeasureResult((1e-4,)))
    except ArtifactError as e:
        assert "read-only" in str(e), e
    else:
        raise AssertionError("added to a read-only database")
print("ok")
"""
    paths = [str(db_path), str(db_path.parent)]
    made = subprocess.run(["chattr", "+i", *paths], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i: {made.stderr.strip()}")
    try:
        run = python(code, timeout=TIMEOUT)
    finally:
        subprocess.run(["chattr", "-i", *paths], check=False)
    run.assert_ok()
