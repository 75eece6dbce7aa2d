"""Accuracy and speed of the generated C's vector math (ember/codegen/c_vmath.py).

Accuracy: each function over float32 inputs (every `stride`-th bit pattern of the whole range,
plus the regions where the function changes, densely), as the maximum error in ULP of the float32
result against the float64 reference (ULP: the spacing of float32 at the correctly rounded value).

Speed: GB/s (bytes read + written) of single-threaded elementwise kernels over 4M floats, against
a copy kernel of the same size, the same kernels computing libm lane by lane (the code ember
generated before), and torch's own functions. Medians of repeated runs.

    PYTHONPATH=. python benchmarks/vector_math.py [--stride 256] [--size 4194304]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember import te  # noqa: E402
from ember.codegen import c_expr  # noqa: E402
from ember.kernel import build  # noqa: E402

try:
    from scipy.special import erf as _erf64
except ImportError:  # NumPy has no erf
    _erf64 = np.vectorize(math.erf, otypes=["float64"])


def _sigmoid64(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


# name: (te function, float64 reference, the regions to sweep densely)
FUNCTIONS = {
    "exp": (te.exp, np.exp, [(-104.0, 89.0), (-1.0, 1.0)]),
    "log": (te.log, np.log, [(0.5, 2.0), (0.0, 1e-37), (1e-3, 1e3)]),
    "tanh": (te.tanh, np.tanh, [(-10.0, 10.0), (-0.7, 0.7), (-1e-3, 1e-3)]),
    "erf": (te.erf, _erf64, [(-4.5, 4.5), (-1.0, 1.0), (-1e-3, 1e-3)]),
    "sigmoid": (te.sigmoid, _sigmoid64, [(-105.0, 20.0), (-1.0, 1.0)]),
    "expm1": (te.expm1, np.expm1, [(-30.0, 90.0), (-1.0, 1.0), (-1e-3, 1e-3)]),
    "log1p": (te.log1p, np.log1p, [(-1.0, 1e3), (-1e-3, 1e-3)]),
}

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
# elementwise expressions timed (te function of one value)
KERNELS = {
    "copy": lambda x: x,
    "exp": te.exp,
    "tanh": te.tanh,
    "erf": te.erf,
    "sigmoid": te.sigmoid,
    "gelu-tanh": lambda x: 0.5 * x * (1.0 + te.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))),
    "gelu-erf": lambda x: 0.5 * x * (1.0 + te.erf(x * (1 / math.sqrt(2)))),
}


@contextlib.contextmanager
def libm_per_lane():
    """Generate code the way ember did before its vector math: libm lane by lane."""
    saved = c_expr.VECTOR_MATH
    c_expr.VECTOR_MATH = {}
    try:
        yield
    finally:
        c_expr.VECTOR_MATH = saved


def kernel(fn, n: int, lanes: int, scalar: bool = True):
    """A kernel over float32 (n,): f(A, V) or, with `scalar`, f(A, S, V), where V = fn(A) in a loop
    vectorized by `lanes` (n is a multiple) and S = fn(A) in a scalar loop."""
    a = te.placeholder((n,), "float32", name="A")
    v = te.compute((n,), lambda i: fn(a[i]), name="V")
    outs = [te.compute((n,), lambda i: fn(a[i]), name="S"), v] if scalar else [v]
    s = te.create_schedule([o.op for o in outs])
    _, inner = s[v].split(v.op.axis[0], factor=lanes)
    s[v].vectorize(inner)
    return build(s, [a, *outs])


def float32_sweep(stride: int, regions, dense: int = 1 << 18, rng=None) -> np.ndarray:
    """Every `stride`-th float32 bit pattern (from a random start), and `dense` evenly spaced bit
    patterns in each region (lo, hi): both signs, zeros, infinities and NaNs included."""
    rng = rng or np.random.default_rng()
    parts = [np.arange(int(rng.integers(stride)), 1 << 32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    for lo, hi in regions:  # a region through zero has a negative and a positive half
        if lo < 0:
            parts += [-float32_sweep_between(0.0, -lo, dense // 2), float32_sweep_between(0.0, hi, dense // 2)]
        else:
            parts.append(float32_sweep_between(lo, hi, dense))
    return np.concatenate(parts).astype(np.float32)


def float32_sweep_between(lo: float, hi: float, count: int) -> np.ndarray:
    """`count` evenly spaced bit patterns of the non-negative floats in [lo, hi]."""
    bits = np.float32([lo, hi]).view(np.int32)
    return np.linspace(bits[0], bits[1], count).astype(np.int32).view(np.float32)


def evaluate(k, x: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Run a scalar-and-vector kernel of size `chunk` over x: its (scalar, vector) outputs."""
    pad = -len(x) % chunk
    xs = np.concatenate([x, np.ones(pad, np.float32)])
    s, v = np.empty_like(xs), np.empty_like(xs)
    for i in range(0, len(xs), chunk):
        k(xs[i:i + chunk], s[i:i + chunk], v[i:i + chunk])
    return s[:len(x)], v[:len(x)]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two float32 arrays hold the same bits, NaNs aside: a NaN's sign and payload are
    whichever operand the CPU propagates (x86: the first of an instruction's), which the C compiler
    orders as it likes, so only NaN-ness is compared there."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int32), b[~nan].view(np.int32)))


def ulp_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The error of each float32 result in ULP of the correctly rounded reference; where that is
    infinite or NaN the result must be the same (0 ULP) or it counts as an infinite error."""
    with np.errstate(over="ignore", invalid="ignore"):
        want = ref.astype(np.float32)
        special = ~np.isfinite(want)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        err = np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(want)).astype(np.float64)
        err = np.where(np.isfinite(got), err, np.inf)
    return np.where(special, np.where(same, 0.0, np.inf), err)


def accuracy(name: str, stride: int, chunk: int = 1 << 16, lanes: int = 16, dense: int = 1 << 18):
    """(max ULP error, the input where it is, inputs checked, vector and scalar agree bitwise)."""
    fn, ref, regions = FUNCTIONS[name]
    x = float32_sweep(stride, regions, dense)
    s, v = evaluate(kernel(fn, chunk, lanes), x, chunk)
    with np.errstate(all="ignore"):
        err = ulp_errors(v, ref(x.astype(np.float64)))
    worst = int(np.argmax(err))
    return float(err[worst]), float(x[worst]), len(x), same_bits(s, v)


def throughput(size: int, lanes: int, repeat: int) -> dict[str, dict[str, float]]:
    """GB/s of each KERNELS entry: ember's vector math, libm lane by lane, torch."""
    import torch

    torch.set_num_threads(1)
    x = (np.random.default_rng().standard_normal(size) * 3).astype(np.float32)
    y = np.empty_like(x)
    gbs = lambda seconds: 2 * x.nbytes / seconds / 1e9  # noqa: E731
    tx = torch.from_numpy(x)
    torch_fns = {
        "copy": lambda: tx.clone(), "exp": lambda: torch.exp(tx), "tanh": lambda: torch.tanh(tx),
        "erf": lambda: torch.erf(tx), "sigmoid": lambda: torch.sigmoid(tx),
        "gelu-tanh": lambda: torch.nn.functional.gelu(tx, approximate="tanh"),
        "gelu-erf": lambda: torch.nn.functional.gelu(tx),
    }
    out = {}
    for name, fn in KERNELS.items():
        row = {"ember": gbs(kernel(fn, size, lanes, scalar=False).bench(x, y, repeat=repeat).median)}
        if name != "copy":
            with libm_per_lane():
                row["libm per lane"] = gbs(kernel(fn, size, lanes, scalar=False).bench(x, y, repeat=repeat).median)
        from ember.runtime.bench import bench

        row["torch"] = gbs(bench(torch_fns[name], repeat=repeat).median)
        out[name] = row
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stride", type=int, default=256, help="sweep every STRIDE-th float32 bit pattern")
    parser.add_argument("--size", type=int, default=1 << 22, help="elements of the timed kernels")
    parser.add_argument("--lanes", type=int, default=16, help="vector width of the kernels")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    print(f"accuracy (float32, every {args.stride}th bit pattern + dense regions, {args.lanes} lanes)")
    print(f"{'function':10} {'max ULP':>8} {'at x':>14} {'inputs':>10}  vector == scalar")
    for name in FUNCTIONS:
        err, at, count, same = accuracy(name, args.stride, lanes=args.lanes)
        print(f"{name:10} {err:8.3f} {at:14.7g} {count:10d}  {same}")
    print(f"\nthroughput, GB/s (read + write) of {args.size} float32, one thread, median of {args.repeat}")
    rows = throughput(args.size, args.lanes, args.repeat)
    cols = ["ember", "libm per lane", "torch"]
    print(f"{'kernel':10}" + "".join(f"{c:>15}" for c in cols) + f"{'ember/copy':>12}")
    for name, row in rows.items():
        cells = "".join(f"{row[c]:15.2f}" if c in row else f"{'':15}" for c in cols)
        print(f"{name:10}{cells}{row['ember'] / rows['copy']['ember']:12.2f}")


if __name__ == "__main__":
    main()
