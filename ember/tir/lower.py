"""Lowering: a scheduled PrimFunc (blocks, annotated loops) to the plain loops that code
generation reads (one flat index per access, vector expressions, no blocks).

The passes run in the order of PASSES; `lower(func, print_after=True)` (or EMBER_PRINT_LOWER=1)
prints the function after each one, `lower(func, debug=True)` (or EMBER_DEBUG=1) runs the
loop-IR verifier (tir.verify) on its input and after each one, naming the pass at fault, and
`skip=[...]` turns optional ones off to find the pass at fault. hoist_init, compact_buffers,
prefetch, unroll, vectorize and version_guards are optimizations and may be skipped; the others
are needed for code generation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from .. import config
from ..errors import ConfigError
from .stmt import PrimFunc
from .transform.compact_buffers import compact_buffers
from .transform.flatten import flatten
from .transform.hoist_init import hoist_init
from .transform.lower_blocks import lower_blocks
from .transform.prefetch import prefetch_panels
from .transform.simplify_stmt import simplify_body
from .transform.storage_align import storage_align
from .transform.unroll import unroll
from .transform.vectorize import vectorize
from .transform.version_guards import version_guards
from .verify import verify

PASSES: list[tuple[str, Callable[[PrimFunc], PrimFunc]]] = [
    ("hoist_init", hoist_init),
    ("compact_buffers", compact_buffers),
    ("lower_blocks", lower_blocks),
    ("storage_align", storage_align),
    ("prefetch", prefetch_panels),
    ("flatten", flatten),
    ("simplify", simplify_body),
    ("unroll", unroll),
    ("simplify_unrolled", simplify_body),
    ("vectorize", vectorize),
    ("simplify_vectors", simplify_body),
    ("version_guards", version_guards),
]
OPTIONAL = {"hoist_init", "compact_buffers", "prefetch", "unroll", "vectorize", "simplify_unrolled", "simplify_vectors",
            "version_guards"}


def lower(func: PrimFunc, *, print_after: bool | None = None, skip: Sequence[str] = (),
          vector_bytes: int | None = None, debug: bool | None = None,
          passes: Sequence[tuple[str, Callable[[PrimFunc], PrimFunc]]] = PASSES) -> PrimFunc:
    """Run the lowering passes (`passes`: a backend's list, ember.backends; PASSES by default).
    `vector_bytes` is the target's SIMD register size (vectorized loops wider than one register
    are split into several registers); None leaves them whole."""
    known = list(dict.fromkeys(name for name, _ in (*PASSES, *passes)))
    unknown = set(skip) - set(known)  # (a pass of PASSES that `passes` leaves out is skipped already)
    if unknown:
        raise ConfigError(f"unknown lowering passes {sorted(unknown)}; the passes are {known}")
    required = set(skip) - OPTIONAL
    if required:
        raise ConfigError(f"passes {sorted(required)} are required for code generation and cannot be skipped")
    show = config.get("print_lower") if print_after is None else print_after
    check = config.get("debug") if debug is None else debug
    if check:
        verify(func, "the lowering's input")
    for name, fn in passes:
        if name in skip:
            continue
        new = fn(func, vector_bytes) if fn is vectorize else fn(func)
        if check:
            verify(new, f"lowering pass {name}")
        if show:
            print(f"# after {name}{' (unchanged)' if new is func else ''}\n{new}\n", file=sys.stderr)
        func = new
    return func
