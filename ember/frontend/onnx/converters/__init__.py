"""Converters of ONNX operators, one module per family; importing this package fills the table."""

from . import control, elementwise, fused, legacy, nn, recurrent, shape  # noqa: F401  (each registers its converters)
