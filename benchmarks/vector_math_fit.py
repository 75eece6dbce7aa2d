"""Fits the float32 polynomial coefficients of ember/codegen/c_vmath.py and prints them as C.

Each polynomial fits a function on an interval for the smallest relative error of the final
result: weighted least squares on Chebyshev nodes, reweighted toward minimax (Lawson's
algorithm); then the coefficients are rounded to float32 one at a time, lowest degree first,
the higher ones refitted after each rounding, so that they absorb its error.

    PYTHONPATH=. python benchmarks/vector_math_fit.py
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=["float64"])
_erfc = np.vectorize(math.erfc, otypes=["float64"])


def fit(f, lo: float, hi: float, degree: int, var=lambda x: x, weight=lambda x: 1.0, nodes: int = 3000,
        rounds: int = 40) -> np.ndarray:
    """float32 coefficients (lowest degree first) of p with p(var(x)) ~ f(x) on [lo, hi]."""
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    vander = np.vander(var(x), degree + 1, increasing=True)
    y, w = f(x), weight(x) * np.ones_like(x)
    fixed: list[float] = []
    while len(fixed) <= degree:
        rest = y - vander[:, :len(fixed)] @ np.array(fixed, dtype=np.float64)
        cols = vander[:, len(fixed):]
        lawson = np.full(nodes, 1.0 / nodes)
        for _ in range(rounds):
            sw = np.sqrt(lawson) * w
            coeffs, *_ = np.linalg.lstsq(cols * sw[:, None], rest * sw, rcond=None)
            err = np.abs((cols @ coeffs - rest) * w)
            lawson = lawson * err / np.sum(lawson * err)
        fixed.append(float(np.float32(coeffs[0])))
    return np.array(fixed, dtype=np.float32)


LN2 = math.log(2)
FITS = {
    # e^r = 1 + r + r^2 P(r)
    "_EXP_P": (lambda r: (np.expm1(r) - r) / (r * r), -LN2 / 2, LN2 / 2, 4, {"weight": lambda r: r * r / np.exp(r)}),
    # log(1 + f) = f + f^2 Q(f)
    "_LOG_Q": (lambda f: (np.log1p(f) - f) / (f * f), math.sqrt(0.5) - 1, math.sqrt(2) - 1, 8,
               {"weight": lambda f: f * f / np.abs(np.log1p(f))}),
    # tanh(x) = x + x^3 P(x^2)
    "_TANH_P": (lambda x: (np.tanh(x) - x) / x**3, 1e-3, 0.625, 5,
                {"var": lambda x: x * x, "weight": lambda x: x**3 / np.tanh(x)}),
    # erf(x) = x + x P(x^2)
    "_ERF_P": (lambda x: _erf(x) / x - 1, 1e-3, 0.875, 6, {"var": lambda x: x * x, "weight": lambda x: x / _erf(x)}),
    # erfc(x) = e^{-x^2} R(x - 2), relative to erf(x) = 1 - erfc(x)
    "_ERFC_R": (lambda x: _erfc(x) * np.exp(x * x), 0.875, 4.0, 11,
                {"var": lambda x: x - 2, "weight": lambda x: _erfc(x) / _erf(x)}),
}


def main() -> None:
    for name, (f, lo, hi, degree, options) in FITS.items():
        coeffs = fit(f, lo, hi, degree, **options)
        print(f"{name} = ({', '.join(_c_float(c) for c in coeffs)})")


def _c_float(c: np.float32) -> str:
    """A float32 as a C hex literal, as c_vmath writes them: "0x1.55555p-2f"."""
    mantissa, exponent = float(c).hex().split("p")
    return f'"{mantissa.rstrip("0").rstrip(".")}p{exponent}f"'


if __name__ == "__main__":
    main()
