"""Structural equality and hashing of loop-IR functions: two functions are equal when they differ
only in the identity (and names) of their variables and buffers. Used to check that a replayed
trace rebuilt the same function, and to key workloads and caches.
"""

from __future__ import annotations

import dataclasses
import hashlib

from .expr import Buffer, Var


def structural_key(node) -> str:
    """A canonical text of node: variables and buffers are numbered in order of appearance."""
    ids: dict[int, int] = {}
    out: list[str] = []

    def walk(x):
        if isinstance(x, Var):
            k = ids.setdefault(id(x), len(ids))
            out.append(f"var{k}:{x.dtype}")
        elif isinstance(x, Buffer):
            k = ids.setdefault(id(x), len(ids))
            out.append(f"buf{k}:{x.dtype}:{x.scope}(")
            for d in x.shape:
                walk(d)
            out.append(")")
        elif dataclasses.is_dataclass(x):
            out.append(type(x).__name__ + "(")
            for f in dataclasses.fields(x):
                if f.name not in ("uid", "name") or not isinstance(x, Var | Buffer):
                    walk(getattr(x, f.name))
            out.append(")")
        elif isinstance(x, tuple | list):
            out.append("[")
            for y in x:
                walk(y)
            out.append("]")
        else:
            out.append(repr(x))

    walk(node)
    return " ".join(out)


def structural_equal(a, b) -> bool:
    return structural_key(a) == structural_key(b)


def structural_hash(node) -> str:
    return hashlib.sha256(structural_key(node).encode()).hexdigest()
