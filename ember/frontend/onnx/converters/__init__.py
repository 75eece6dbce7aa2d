"""Converters of ONNX operators, one module per family; importing this package fills the table."""

from . import (  # noqa: F401  (each registers its converters)
    control,
    dynamic,
    elementwise,
    fused,
    legacy,
    nn,
    recurrent,
    shape,
)
