"""The walk of a kernel's AST: the functions being walked (a nested @jit function inlined, its
parameters bound to the call's values, its final `return` the call's value), the kernel's line
in every error, and the deferred loads read in before a statement that writes memory. What the
walk does at each node is the layers above this class (the package doc)."""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass

from ....errors import TileError
from ...function import KernelFunction
from ...language.dtypes import unwrap
from .. import values as V
from ..emitter import Emitter


class Return(Exception):
    """A `return` at the end of a function walked: its value."""

    def __init__(self, value):
        self.value = value


@dataclass
class Frame:
    """One function being walked: its source (for error lines), globals and variables."""

    fn: KernelFunction
    env: dict


class Walker:
    """The walk's state: the Emitter, the builtins, the frames of the functions being walked."""

    def __init__(self, emitter: Emitter, builtins):
        self.em = emitter
        self.builtins = builtins
        self.frames: list[Frame] = []
        self.node: ast.AST | None = None
        self.carried: set = set()  # buffers of loop-carried values (tl.dot may accumulate in place)

    def where(self) -> str:
        if not self.frames or self.node is None or not hasattr(self.node, "lineno"):
            return "the kernel"
        fn = self.frames[-1].fn
        line = fn.starting_line_number + self.node.lineno - 1
        text = fn.src.splitlines()[self.node.lineno - 1].strip() if self.node.lineno <= len(fn.src.splitlines()) else ""
        return f"{fn.file}:{line} (in {fn.__name__}): {text}"

    def error(self, msg: str) -> TileError:
        return TileError(f"{self.where()}\n  {msg}")

    def run(self, fn: KernelFunction, args: dict) -> object:
        """Walk fn's body with its parameters bound to args; the returned value."""
        tree = ast.parse(fn.src)
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise TileError(f"{fn.file}: {fn.__name__} is not a function definition")
        self.frames.append(Frame(fn, dict(args)))
        try:
            self.block(fdef.body)
        except Return as r:
            return r.value
        finally:
            self.frames.pop()
        return None

    def inline(self, fn: KernelFunction, args: tuple, kwargs: dict):
        try:
            bound = fn.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(f"call of {fn.__name__}: {e}") from None
        bound.apply_defaults()
        values = {k: unwrap(v) for k, v in bound.arguments.items()}
        saved = self.node
        try:
            return self.run(fn, values)
        finally:
            self.node = saved

    def flush(self) -> None:
        """Read in the deferred loads that values still in use read (emitter.Deferred): a
        statement that writes memory follows."""
        live: set = set()

        def visit(v):
            if isinstance(v, V.Block):
                live.update(v.deps)
            elif isinstance(v, tuple | list):
                for x in v:
                    visit(x)

        for frame in self.frames:
            for v in frame.env.values():
                visit(v)
        for d in self.em.pending:
            if d.buffer is None and d in live:
                d.read()
        self.em.pending = []

    @property
    def env(self) -> dict:
        return self.frames[-1].env


@contextlib.contextmanager
def no_return(frontend: Walker):
    """A value returned under a run-time condition or in a run-time loop is an error."""
    try:
        yield
    except Return:
        raise frontend.error("`return` of a value under a run-time condition is not supported by the compiler: "
                             "assign it, and return it at the end of the function") from None
