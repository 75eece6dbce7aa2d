"""Converters of ONNX operators, one module per family; importing this package fills the table."""

from . import control, dynamic, elementwise, fused, legacy, nn, shape  # noqa: F401  (each registers its converters)
