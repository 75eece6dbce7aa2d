"""The `pow` intrinsic in NumPy, the definition that the interpreter and the `pow` operator's
reference share with the C target (its vector math for floats, `ember_ipow` for integers).

x^y wraps as repeated products do in the type (exponentiation by squaring; NumPy's arrays do the
same); a negative exponent gives 0, but 1 for x = 1 and +-1 for x = -1 by the parity of y: torch's
integer pow. NumPy refuses negative integer exponents and ONNX leaves them undefined.
"""

from __future__ import annotations

import numpy as np


def power(x, y):
    """x^y elementwise for x and y of one dtype (arrays or scalars; a scalar for scalars)."""
    if not np.issubdtype(np.asarray(x).dtype, np.integer):
        return np.power(x, y)
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    r, b, e = np.ones_like(x), x.copy(), np.where(y < 0, 0, y)
    with np.errstate(over="ignore"):
        while e.any():
            r, b, e = np.where(e & 1, r * b, r), b * b, e >> 1
    if np.issubdtype(x.dtype, np.signedinteger):
        negative = np.where(x == 1, 1, np.where(x == -1, np.where(y & 1, -1, 1), 0)).astype(x.dtype)
        r = np.where(y >= 0, r, negative)
    return r[()]
