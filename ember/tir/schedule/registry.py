"""The schedule primitives by name, as their definitions declare them: a trace instruction's
kind names one, its signature says which arguments are handles, and its return annotation
whether its outputs are a list (`split`, `get_loops`: a list even of one element)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_origin


@dataclass(frozen=True)
class Primitive:
    fn: Callable  # fn(sch, *handles, **attrs)
    signature: inspect.Signature
    returns_list: bool


PRIMITIVES: dict[str, Primitive] = {}


def primitive(fn: Callable) -> Callable:
    """Register a schedule primitive: fn(sch, *handles, **attrs), annotated with what it returns."""
    sig = inspect.signature(fn)
    PRIMITIVES[fn.__name__] = Primitive(fn, sig, _is_list(sig.return_annotation))
    return fn


def _is_list(annotation) -> bool:
    if isinstance(annotation, str):  # postponed annotations (from __future__ import annotations)
        return annotation == "list" or annotation.startswith("list[")
    return annotation is list or get_origin(annotation) is list
