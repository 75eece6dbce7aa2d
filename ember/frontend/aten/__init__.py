"""Handlers of core ATen operators, one module per family; importing this package fills the table."""

from . import elementwise, nn, reduce, shape  # noqa: F401  (each registers its handlers)
from .registry import HANDLERS, Unavailable, handles, lookup

__all__ = ["HANDLERS", "Unavailable", "handles", "lookup"]
