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

A file ember cannot write (read-only permissions or file system, an immutable file) is opened
read-only, for lookups: opening for writing switches the journal and may create the schema,
which are writes; adding to it is then an ArtifactError. Every SQLite failure (a file that is not
a database, a damaged or truncated one, another program's tables, a missing folder, a lock held
past the busy timeout) is an ArtifactError naming the file and what is wrong, never a raw
sqlite3 error.

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
    """Tuning records in the SQLite file at `path` (":memory:" for one that lives in memory);
    `readonly=True` opens it for lookups only, as a file ember cannot write is opened."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.readonly = readonly
        if self.path != ":memory:" and not Path(self.path).parent.is_dir():
            raise ArtifactError(f"tuning database {self.path}: its folder {Path(self.path).parent} does not exist")
        with self._errors("cannot open it"):
            if not readonly:
                try:
                    self._conn = self._open_for_writing()
                except sqlite3.Error as e:  # a file that cannot be written (or its journal not created)
                    cannot_write = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
                    if e.sqlite_errorcode & 0xFF not in cannot_write or not Path(self.path).is_file():
                        raise
                    self.readonly = True
            if self.readonly:
                self._conn = _open_readonly(self.path)
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                self._conn.close()
                raise ArtifactError(f"{self.path}: tuning database schema version {version}; this ember reads "
                                    f"version {SCHEMA_VERSION}")
            tables = {n for (n,) in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"workloads", "records"} <= tables:
            self._conn.close()
            raise ArtifactError(f"{self.path} is an SQLite file but not an ember tuning database (its tables: "
                                f"{sorted(tables) or 'none'})")

    def _open_for_writing(self) -> sqlite3.Connection:
        """A connection that may write, the schema created in a new file."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            _use_wal(conn)
            with _transaction(conn):
                if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                    if conn.execute("SELECT 1 FROM sqlite_master").fetchone():
                        raise ArtifactError(f"{self.path} is an SQLite file but not an ember tuning database (it "
                                            f"has tables of its own and no schema version)")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def _errors(self, doing: str):
        """sqlite3's errors as ArtifactErrors naming the file and what is wrong."""
        try:
            yield
        except sqlite3.Error as e:
            code = getattr(e, "sqlite_errorcode", 0) & 0xFF
            why = {sqlite3.SQLITE_NOTADB: "it is not an SQLite database (another kind of file, or damaged)",
                   sqlite3.SQLITE_CORRUPT: "the file is damaged (truncated or overwritten)",
                   sqlite3.SQLITE_BUSY: f"another process held its lock for more than {BUSY_TIMEOUT_S:g} s",
                   sqlite3.SQLITE_LOCKED: f"another process held its lock for more than {BUSY_TIMEOUT_S:g} s",
                   sqlite3.SQLITE_CANTOPEN: "the file or its folder cannot be opened (missing, or no permission)",
                   sqlite3.SQLITE_READONLY: "the file cannot be written",
                   sqlite3.SQLITE_FULL: "the disk is full"}.get(code, "")
            raise ArtifactError(f"tuning database {self.path}: {doing}: {why + ' ' if why else ''}(sqlite: {e})") \
                from None

    def _writing(self):
        if self.readonly:
            raise ArtifactError(f"tuning database {self.path} was opened read-only (ember cannot write the file): "
                                f"nothing can be added to it")
        return self._errors("cannot write it")

    def commit_workload(self, task: Task, target: str) -> None:
        """Record the task's workload for `target` (nothing happens when it is there already)."""
        with self._writing(), _transaction(self._conn):
            self._conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?, ?, ?)",
                               (task.key, target, task.name, str(task.func), task.flops, time.time()))

    def add(self, task_key: str, target: str, trace: Trace, result: MeasureResult) -> TuningRecord:
        """Store one measured candidate of a committed workload."""
        from ..version import __version__

        record = TuningRecord(task_key, target, trace, tuple(result.latencies_s), result.error,
                              result.cv, __version__, time.time())
        with self._writing(), _transaction(self._conn):
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
        with self._errors("cannot read it"):
            row = self._conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY trace ORDER BY id DESC) "
                f"AS newest FROM records WHERE key = ? AND target = ?) WHERE newest = 1 AND error IS NULL "
                f"ORDER BY median, id LIMIT 1", (key, target)).fetchone()
        return _record(row) if row else None

    def schedules(self, target: str) -> TunedSchedules:
        """The best record's trace of every workload tuned for `target`: the compiler's schedule
        lookup (`ember.compile(..., database=db)` asks for it)."""
        with self._errors("cannot read it"):
            keys = [k for (k,) in self._conn.execute("SELECT key FROM workloads WHERE target = ?", (target,))]
        best = {k: self.best(k, target) for k in keys}
        return TunedSchedules({k: r.trace.to_json() for k, r in best.items() if r is not None})

    def records(self, key: str, target: str | None = None) -> list[TuningRecord]:
        """Every record of the workload (on `target`, or on any target), in insertion order."""
        where, args = ("key = ?", (key,)) if target is None else ("key = ? AND target = ?", (key, target))
        with self._errors("cannot read it"):
            rows = self._conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records WHERE {where} ORDER BY id", args)
            return [_record(row) for row in rows]

    def workloads(self) -> list[WorkloadEntry]:
        with self._errors("cannot read it"):
            rows = self._conn.execute("SELECT key, target, name, func, flops, created FROM workloads ORDER BY rowid")
            return [WorkloadEntry(*row) for row in rows]

    def __len__(self) -> int:
        with self._errors("cannot read it"):
            return self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open_readonly(path: str) -> sqlite3.Connection:
    """A connection that only reads. A WAL file read-only needs its shared-memory file (-shm),
    which a folder ember cannot write cannot get: then it is read as immutable (no other writer is
    expected on a file nobody here may write)."""
    uri = Path(path).resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("PRAGMA user_version").fetchone()
        return conn
    except sqlite3.OperationalError as e:
        conn.close()
        if e.sqlite_errorcode & 0xFF != sqlite3.SQLITE_CANTOPEN:
            raise
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)


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
