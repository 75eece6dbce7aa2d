"""One program of an interpreted launch: which program runs, and where in the kernel it is.

`Program` is the base of the builtins' implementation: it knows the kernel, the grid and the
program being run, and `_where()` names them with the kernel's source line for an error message.
"""

from __future__ import annotations

import linecache
import sys
from pathlib import Path

PACKAGE = str(Path(__file__).resolve().parent.parent)  # ember/triton: frames there are not the kernel's


class Program:
    """The program `pid` of a launch over `grid` of kernel `name`."""

    def __init__(self, name: str, grid: tuple[int, int, int]):
        self.name = name
        self.grid = grid
        self.pid = (0, 0, 0)
        self.failed_cas = (None, 0)  # (the address a program's atomic_cas keeps failing on, how often)

    def start(self, pid: tuple[int, int, int]) -> None:
        """Run program `pid` next."""
        self.pid = pid
        self.failed_cas = (None, 0)

    def _where(self) -> str:
        """The kernel, the program and the source line being run (the innermost frame outside
        ember.triton)."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(PACKAGE):
            frame = frame.f_back
        where = f"kernel {self.name}, program {self.pid}"
        if frame is not None:
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            where += f", {frame.f_code.co_filename}:{frame.f_lineno} `{line}`"
        return where

