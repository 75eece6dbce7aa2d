"""Handlers of core ATen operators, one module per family; importing this package fills the table
(ember.frontend.torch.registry)."""

from . import composite, control, elementwise, indexing, moe, nn, recurrent, reduce, shape, strided  # noqa: F401  (each registers)
