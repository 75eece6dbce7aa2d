"""The tuning database: every measured schedule of every workload, in one SQLite file.

Tables (the schema's version is SQLite's `user_version`; a file of another version is refused):
- workloads (key, target, name, func, flops, created): one row per workload and target; `key` is
  the structural hash of the unscheduled function (`Task.key`), `func` its text, for readers.
- records (id, key, target, trace, latencies, median, cv, error, version, created): one row per
  measured candidate, in insertion order; `trace` and `latencies` (seconds per call, one per
  repeat) are JSON, `median` and `cv` are NULL when the candidate failed (`error` says how);
  `version` is the ember version that measured it. The trace holds every sampling decision, so a
  record replays to exactly the function that was measured.

`best(key, target)` is the fastest record that did not fail, counting only the latest record of
each trace (the tuner re-measures its winner and the task's own schedule side by side at the end;
those timings replace a lucky first one). Tuning resumes from a file: reopen
it and the records are there. Several processes may add to one file at once (WAL journal; a
writer waits up to BUSY_TIMEOUT_S for another's lock).

A target is named by its `ember.target.Target.key`: the code generator, the CPU model and the SIMD
features the C compiler enables under the configured flags (-march=native), so that a database
copied to a machine with the same CPU gives the same schedules there and a different CPU finds no
records. `schedules(target)` is the compiler's lookup of the best trace of each workload.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ArtifactError
from ..tir.schedule import Trace
from .measure import MeasureResult
from .task import Task

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE workloads (
    key TEXT NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL, func TEXT NOT NULL,
    flops INTEGER NOT NULL, created REAL NOT NULL, PRIMARY KEY (key, target));
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, target TEXT NOT NULL,
    trace TEXT NOT NULL, latencies TEXT NOT NULL, median REAL, cv REAL, error TEXT,
    version TEXT NOT NULL, created REAL NOT NULL,
    FOREIGN KEY (key, target) REFERENCES workloads (key, target));
CREATE INDEX records_by_speed ON records (key, target, median);
"""
_RECORD_COLUMNS = "key, target, trace, latencies, cv, error, version, created"


@dataclass(frozen=True, eq=False)
class TuningRecord:
    key: str
    target: str
    trace: Trace
    latencies_s: tuple[float, ...]
    error: str | None
    cv: float  # NaN when the candidate failed
    version: str
    created: float  # seconds since the epoch

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def median_s(self) -> float:
        return MeasureResult(self.latencies_s, self.error).median_s


@dataclass(frozen=True)
class WorkloadEntry:
    key: str
    target: str
    name: str
    func: str  # the unscheduled function's text
    flops: int
    created: float


@dataclass(frozen=True, eq=False)
class TunedSchedules:
    """The best trace (JSON) of each tuned workload key, for one target: a schedule lookup
    (ember.lowering.ScheduleLookup). Plain data, so lowering worker processes get it whole."""

    traces: Mapping[str, str]

    def __call__(self, key: str) -> Trace | None:
        trace = self.traces.get(key)
        return Trace.from_json(trace) if trace is not None else None


class Database:
    """Tuning records in the SQLite file at `path` (":memory:" for one that lives in memory)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        _use_wal(self._conn)
        with _transaction(self._conn):
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if version not in (0, SCHEMA_VERSION):
            self._conn.close()
            raise ArtifactError(f"{self.path}: tuning database schema version {version}; this ember reads "
                             f"version {SCHEMA_VERSION}")

    def commit_workload(self, task: Task, target: str) -> None:
        """Record the task's workload for `target` (nothing happens when it is there already)."""
        with _transaction(self._conn):
            self._conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?, ?, ?)",
                               (task.key, target, task.name, str(task.func), task.flops, time.time()))

    def add(self, task_key: str, target: str, trace: Trace, result: MeasureResult) -> TuningRecord:
        """Store one measured candidate of a committed workload."""
        from ..version import __version__

        record = TuningRecord(task_key, target, trace, tuple(result.latencies_s), result.error,
                              result.cv, __version__, time.time())
        with _transaction(self._conn):
            if not self._conn.execute("SELECT 1 FROM workloads WHERE key = ? AND target = ?",
                                      (task_key, target)).fetchone():
                raise KeyError(f"workload {task_key} on target {target!r} is not in {self.path}: "
                               f"commit_workload(task, target) first")
            median = None if math.isinf(result.median_s) else result.median_s
            self._conn.execute(
                f"INSERT INTO records ({_RECORD_COLUMNS}, median) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (task_key, target, trace.to_json(), json.dumps(record.latencies_s),
                 None if math.isnan(record.cv) else record.cv, record.error, record.version, record.created,
                 median))
        return record

    def best(self, key: str, target: str) -> TuningRecord | None:
        """The fastest record of the workload on `target` that did not fail (None: there is none),
        among each trace's latest records: a re-measurement supersedes earlier timings."""
        row = self._conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY trace ORDER BY id DESC) "
            f"AS newest FROM records WHERE key = ? AND target = ?) WHERE newest = 1 AND error IS NULL "
            f"ORDER BY median, id LIMIT 1", (key, target)).fetchone()
        return _record(row) if row else None

    def schedules(self, target: str) -> TunedSchedules:
        """The best record's trace of every workload tuned for `target`: the compiler's schedule
        lookup (`ember.compile(..., database=db)` asks for it)."""
        keys = [k for (k,) in self._conn.execute("SELECT key FROM workloads WHERE target = ?", (target,))]
        best = {k: self.best(k, target) for k in keys}
        return TunedSchedules({k: r.trace.to_json() for k, r in best.items() if r is not None})

    def records(self, key: str, target: str | None = None) -> list[TuningRecord]:
        """Every record of the workload (on `target`, or on any target), in insertion order."""
        where, args = ("key = ?", (key,)) if target is None else ("key = ? AND target = ?", (key, target))
        rows = self._conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records WHERE {where} ORDER BY id", args)
        return [_record(row) for row in rows]

    def workloads(self) -> list[WorkloadEntry]:
        rows = self._conn.execute("SELECT key, target, name, func, flops, created FROM workloads ORDER BY rowid")
        return [WorkloadEntry(*row) for row in rows]

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to the WAL journal. The switch needs the file to itself, and SQLite answers
    "database is locked" at once, without the busy timeout, while another process is opening the
    same new file: retry until the busy timeout has passed."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE: take the write lock up front, so that two writers never deadlock
    upgrading read locks (the busy timeout makes the second one wait)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _record(row) -> TuningRecord:
    key, target, trace, latencies, cv, error, version, created = row
    return TuningRecord(key, target, Trace.from_json(trace), tuple(json.loads(latencies)), error,
                        math.nan if cv is None else cv, version, created)
