"""Converters of ONNX operators, one module per family; importing this package fills the table."""

from . import (  # noqa: F401  (each registers its converters)
    bits,
    composite,
    control,
    dynamic,
    einsum,
    elementwise,
    fused,
    image,
    indexing,
    legacy,
    loss,
    ml,
    nn,
    preview,
    quantize,
    recurrent,
    sequence,
    shape,
    signal,
    text,
)
