"""`tl.math`: the math builtins under Triton's `triton.language.math` names (the same builtins
as `tl.exp` and the others, so kernels written either way compile and interpret alike)."""

from .core import (  # noqa: F401
    abs,
    ceil,
    cos,
    div_rn,
    erf,
    exp,
    exp2,
    fdiv,
    floor,
    fma,
    log,
    log2,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    sqrt_rn,
    tanh,
    umulhi,
)

__all__ = ["abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "rsqrt",
           "sigmoid", "sin", "sqrt", "sqrt_rn", "tanh", "umulhi"]
