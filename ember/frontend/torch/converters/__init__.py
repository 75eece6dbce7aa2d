"""Handlers of core ATen operators, one module per family; importing this package fills the table
(ember.frontend.torch.registry)."""

from . import control, elementwise, nn, recurrent, reduce, shape  # noqa: F401  (each registers its handlers)
