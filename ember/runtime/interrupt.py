"""Ctrl-C in a model's loops: the process's SIGINT flag, shared by every loaded library.

Python runs its SIGINT handler between bytecodes, so a model's entry function that loops for
hours in C would ignore a Ctrl-C. A library whose entry function has loops holds a SIGINT handler
that sets a flag and calls the handler it replaced (Python's, which then raises KeyboardInterrupt
when the call returns), and a pointer its loops read the flag through (ember.codegen.entry).
`connect(handle)`, on each load of such a library, installs the handler of the first one once per
process and points every library at that handler's flag: one handler, one flag, whatever the
number of models. Libraries are never unloaded (ctypes keeps them), so the handler stays valid.

Not installed when SIGINT has no handler to chain to (the default, which ends the process, loop
and all, or ignored). A handler installed later with `signal.signal(SIGINT, ...)` replaces ember's:
loops are then no longer interrupted (call `connect` again to chain to the new one).
"""

from __future__ import annotations

import ctypes
import threading

from ..codegen.entry import CATCH_SIGINT, INTERRUPT_FLAG, INTERRUPT_HERE

_lock = threading.Lock()
_flag: int | None = None  # the address of the flag the installed handler sets


def connect(handle: ctypes.CDLL) -> None:
    """Point the library's loops at the process's SIGINT flag, installing the handler (this
    library's) when none is; nothing for a library without loops."""
    global _flag
    try:
        slot = ctypes.c_void_p.in_dll(handle, INTERRUPT_FLAG)
    except ValueError:  # no loops
        return
    with _lock:
        if _flag is None and getattr(handle, CATCH_SIGINT)() == 0:
            _flag = ctypes.addressof(ctypes.c_int.in_dll(handle, INTERRUPT_HERE))  # sig_atomic_t: an int
        if _flag is not None:
            slot.value = _flag
