"""Worker processes of ember's own: a pool that runs picklable calls in child Python processes.

    with WorkerPool(4, preload=["ember.lowering"]) as pool:
        funcs = pool.map("ember.lowering:lower_workload", [(w, None) for w in workloads])

Why not multiprocessing: its "spawn" and "forkserver" workers import the caller's main module
again (a script without an `if __name__ == "__main__":` guard runs again in every worker, and
stdin or `-c` code cannot be imported at all), a daemonic process (a multiprocessing.Pool worker)
may not have multiprocessing children, and a "fork" copies the locks other threads hold and an
OpenMP pool that no longer has its threads. A worker here is a fresh interpreter that runs this
module (`python -m ember.workers`), as TVM's popen workers do: it imports only ember and the
modules its calls name, so it works from a script, `-c`, stdin, `-m`, a notebook, a thread or a
daemonic process alike.

How it works:
- Each worker gets the parent's environment (the EMBER_* options), its working directory and its
  `sys.path` (so that ember and the user's modules import as they do in the parent), and the
  `preload` modules are imported before the first call.
- Requests and replies are pickled over a socket pair (the worker's stdout and stderr are the
  parent's, so what a call prints does not disturb them). A call names its function as
  "package.module:function"; a reply is its value, or the exception it raised (with the worker's
  traceback as a note).
- `run(calls)` hands each call to an idle worker (or to the one it names) and waits, each call
  under its own time limit. A worker that dies (its socket closes) or runs past the limit is
  killed, reaped and replaced; the call's outcome says what befell it ("crashed: signal 11
  (SIGSEGV)", "timed out after 2.0 s").
- Workers sit in their own session (a Ctrl-C in the terminal reaches the parent, which decides),
  and exit when the parent does: each watches a pipe whose other end only the parent holds.
  `close()` stops them and reaps them; an unclosed pool is closed when it is collected.
- A worker is stopped the way a Ctrl-C stops the parent: SIGTERM, which its main thread turns
  into KeyboardInterrupt, so that the call under way unwinds and the C compiler it waits for is
  killed with the compiler's children (ember.runtime.build.run_compilers); a worker that has not
  exited TERM_TIMEOUT_S later (stuck in native code) is killed. A pool's workers are stopped
  together, so closing a pool of busy workers (after a Ctrl-C) waits as long as for one. A worker
  whose parent died does the same to itself.

A pool is not thread-safe: use one from one thread at a time.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from .errors import ConfigError, WorkerError

START_TIMEOUT_S = 120.0  # for a worker to import ember and the preloaded modules
STOP_TIMEOUT_S = 2.0  # for a worker told to stop, before it is killed
TERM_TIMEOUT_S = 1.0  # for a worker sent SIGTERM to unwind its call, before it is killed
EXIT_TIMEOUT_S = 30.0  # for a worker whose connection closed to exit, before it is killed
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `import ember` finds this ember


@dataclass(frozen=True)
class Call:
    """A call of `fn` ("package.module:function") with `args`, which may last `limit_s` seconds
    (None: no limit), on worker number `worker` (None: any)."""

    fn: str
    args: tuple = ()
    limit_s: float | None = None
    worker: int | None = None


@dataclass(frozen=True)
class Outcome:
    """How a call ended: "ok" (`value` is what it returned), "error" (`value` is the exception it
    raised) or "lost" (`value` says what befell the worker: it crashed or ran out of time)."""

    status: str
    value: object
    worker: int  # the worker's number
    process: int  # which process it was (a replaced worker is a new process with a new number)
    seconds: float  # from sending the call to its outcome

    def result(self):
        """The value; or the call's exception raised again; or WorkerError when the worker was lost."""
        if self.status == "ok":
            return self.value
        if self.status == "error":
            raise self.value
        raise WorkerError(f"an ember worker process running a call {self.value}")


class _Worker:
    """One child process, its socket, and whether it has said it is ready."""

    def __init__(self, number: int, life_fd: int, preload: Sequence[str], name: str):
        self.number = number
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        with theirs:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), str(life_fd), name],
                pass_fds=(theirs.fileno(), life_fd), env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        self.conn = Connection(ours.detach())
        self.conn.send((list(sys.path), list(preload)))
        self.ready = False

    def wait_ready(self) -> str | None:
        """None once the worker has imported what it needs; else why it never will."""
        if not self.ready:
            if not self.conn.poll(START_TIMEOUT_S):
                return f"did not start within {START_TIMEOUT_S} s"
            try:
                self.conn.recv()
            except (EOFError, OSError):
                return f"failed to start: {self.exit_status()} (its error is on stderr)"
            self.ready = True
        return None

    def exit_status(self) -> str:
        """How the process ended, once its socket has closed (it is exiting: dumping core may take a while)."""
        try:
            code = self.popen.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"stopped answering (its connection closed, but it still ran {EXIT_TIMEOUT_S} s later)"
        if code < 0:
            try:
                return f"crashed: signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                return f"crashed: signal {-code}"
        return f"crashed: exit status {code}"

    def stop(self, kill: bool = False) -> None:
        _stop([self], kill)


def _stop(workers: Sequence[_Worker], kill: bool = False) -> None:
    """Stop the workers and reap them, all at once (a pool closed after a Ctrl-C waits for its
    slowest worker, not for the sum): each is asked to stop (unless `kill`) and given
    STOP_TIMEOUT_S, then sent SIGTERM and given TERM_TIMEOUT_S, then killed."""
    if not kill:
        for w in workers:
            with contextlib.suppress(OSError, EOFError):
                if w.popen.poll() is None:
                    w.conn.send(("stop",))
        _wait_all(workers, STOP_TIMEOUT_S)
    for w in workers:
        if w.popen.poll() is None:
            w.popen.terminate()
    _wait_all(workers, TERM_TIMEOUT_S)
    for w in workers:
        if w.popen.poll() is None:
            w.popen.kill()
        w.popen.wait()
        w.conn.close()


def _wait_all(workers: Sequence[_Worker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for w in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.popen.wait(max(0.0, deadline - time.monotonic()))


class WorkerPool:
    """`size` worker processes (see the module doc); `preload`: modules each imports at start;
    `name`: shown on the workers' command lines (in `ps`)."""

    def __init__(self, size: int, *, preload: Iterable[str] = (), name: str = "ember-worker"):
        if size < 1:
            raise ConfigError(f"a WorkerPool needs at least one worker, got size={size}")
        self._preload, self._name = tuple(preload), name
        self._numbers = iter(range(1 << 62))
        self._life_read, self._life_write = os.pipe()
        self._workers: list[_Worker] = []
        self._closer = weakref.finalize(self, _close, self._workers, self._life_read, self._life_write)
        self._workers.extend(self._start() for _ in range(size))

    def __len__(self) -> int:
        return len(self._workers)

    def process(self, w: int) -> int:
        """The number of the process that is worker `w` now."""
        return self._workers[w].number

    def run(self, calls: Sequence[Call]) -> list[Outcome]:
        """Run the calls, each worker one at a time, each call under its limit; one outcome per call,
        in order. A worker that dies or runs past a limit is replaced."""
        if not self._workers:
            raise WorkerError("this WorkerPool is closed")
        outcomes: list = [None] * len(calls)
        pending = deque(range(len(calls)))
        busy: dict[int, tuple[int, float]] = {}  # worker -> (call, when it was sent)
        while pending or busy:
            for w in range(len(self._workers)):
                j = None if w in busy else next((j for j in pending if calls[j].worker in (None, w)), None)
                if j is None:
                    continue
                pending.remove(j)
                lost = self._send(w, calls[j])  # its limit counts from here, once the worker has started
                if lost is None:
                    busy[w] = (j, time.monotonic())
                else:
                    outcomes[j] = self._lose(w, lost, time.monotonic())
            if not busy:
                continue
            limits = [sent + calls[j].limit_s for j, sent in busy.values() if calls[j].limit_s is not None]
            timeout = max(0.0, min(limits) - time.monotonic()) if limits else None
            wait([self._workers[w].conn for w in busy], timeout)
            for w, (j, sent) in list(busy.items()):
                outcome = self._poll(w, calls[j], sent)
                if outcome is not None:
                    outcomes[j] = outcome
                    del busy[w]
        return outcomes

    def map(self, fn: str, args: Iterable[tuple]) -> list:
        """fn(*a) for each a, in the workers: the values in order, or the first call's exception
        (WorkerError when a worker was lost)."""
        return [o.result() for o in self.run([Call(fn, tuple(a)) for a in args])]

    def restart(self, w: int) -> None:
        """Replace worker `w` by a fresh process (its state, such as loaded libraries, is gone)."""
        self._workers[w].stop()
        self._workers[w] = self._start()

    def close(self) -> None:
        """Stop every worker and reap it."""
        self._closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> _Worker:
        return _Worker(next(self._numbers), self._life_read, self._preload, self._name)

    def _send(self, w: int, call: Call) -> str | None:
        """Send the call to worker `w` (started afresh first when it died while idle); None, or why
        it could not be sent."""
        for attempt in range(2):
            worker = self._workers[w]
            lost = worker.wait_ready()
            if lost is None:
                try:
                    worker.conn.send(("call", call.fn, call.args))
                    return None
                except (BrokenPipeError, ConnectionResetError, EOFError):
                    lost = worker.exit_status()
            if attempt == 0:
                self._replace(w)
        return lost

    def _poll(self, w: int, call: Call, sent: float) -> Outcome | None:
        """The outcome of busy worker `w`'s call, or None while it runs."""
        worker = self._workers[w]
        if worker.conn.poll():
            try:
                status, value = worker.conn.recv()
            except (EOFError, OSError):
                return self._lose(w, worker.exit_status(), sent)
            except Exception as e:  # a reply that does not unpickle here
                status, value = "error", WorkerError(f"the reply of {call.fn} could not be read: {e}")
            return Outcome(status, value, w, worker.number, time.monotonic() - sent)
        if call.limit_s is not None and time.monotonic() >= sent + call.limit_s:
            return self._lose(w, f"timed out after {float(call.limit_s)} s", sent)
        return None

    def _lose(self, w: int, what: str, sent: float) -> Outcome:
        number = self._workers[w].number
        self._replace(w)
        return Outcome("lost", what, w, number, time.monotonic() - sent)

    def _replace(self, w: int) -> None:
        self._workers[w].stop(kill=True)
        self._workers[w] = self._start()


def _close(workers: list[_Worker], life_read: int, life_write: int) -> None:
    _stop(workers)
    workers.clear()
    os.close(life_read)
    os.close(life_write)


# -- in the worker process ----------------------------------------------------------------------
def _serve(conn_fd: int, life_fd: int) -> None:
    """The worker's loop: set up as the parent says, then answer calls until told to stop."""
    os.set_inheritable(conn_fd, False)  # nothing this worker starts (a C compiler) keeps them open
    os.set_inheritable(life_fd, False)
    signal.signal(signal.SIGTERM, _interrupted)
    threading.Thread(target=_exit_with_parent, args=(life_fd,), daemon=True, name="ember-parent-watch").start()
    conn = Connection(conn_fd)
    path, preload = conn.recv()
    sys.path[:] = path
    for module in preload:
        importlib.import_module(module)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        fn = "a call"
        try:
            request = pickle.loads(message)  # here, so that a call whose arguments do not unpickle fails alone
            if request[0] == "stop":
                return
            _, fn, args = request
            reply = ("ok", _function(fn)(*args))
        except Exception as e:
            e.add_note(f"(raised in ember worker process {os.getpid()}:)\n{traceback.format_exc().rstrip()}")
            reply = ("error", e)
        try:
            conn.send(reply)
        except Exception as e:  # the value or the exception does not pickle
            conn.send(("error", WorkerError(f"{fn} returned or raised something that cannot be sent back: "
                                            f"{type(e).__name__}: {e}; it was {reply[1]!r:.500}")))


def _function(fn: str):
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)


def _interrupted(signum, frame):
    """SIGTERM in a worker: the call under way stops as a Ctrl-C stops it."""
    raise KeyboardInterrupt("ember worker stopped")


def _exit_with_parent(life_fd: int) -> None:
    """Block until the parent's end of the pipe closes (the parent exited or closed the pool), then
    stop the main thread's call (SIGTERM to that thread: its wait for a compiler, say, ends at
    once) and exit."""
    while os.read(life_fd, 1):
        pass
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
    time.sleep(TERM_TIMEOUT_S)
    os._exit(1)


if __name__ == "__main__":
    try:
        _serve(int(sys.argv[1]), int(sys.argv[2]))
    except KeyboardInterrupt:  # stopped (SIGTERM) or the parent gone: the call unwound, nothing to report
        sys.exit(1)
