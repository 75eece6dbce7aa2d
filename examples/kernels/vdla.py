"""Tutorial: compiling for an accelerator, the teaching material's GEMM on vdla (ember.accel).

C = A^T B is tiled 8x8 in C and 8 along k; each step stages A's and B's 8x8 tiles in the
device's input and weight memories, the 8x8x8 product runs on its GEMM core (the tensorized
`gemm8x8`), the accumulator tile stays in its accumulator memory until it is stored back.
`ember.lower` shows the instructions (fill_zero, dma_copy2d, fuse_gemm8x8_add, dma_copy2d);
the build runs the host's loops as C and the instructions on the simulator, whose report gives
cycles, DMA bytes and the GEMM core's utilization, and a Chrome trace of its queues.

    python examples/kernels/vdla.py [trace.json]
"""

import sys

import numpy as np

import ember
from ember import te as t
from ember.accel import vdla


def seed_program(n: int = 1024):
    """The material's program as written, with the placement steps it leaves out filled in."""
    A = t.placeholder((n, n), name="A")
    B = t.placeholder((n, n), name="B")
    k = t.reduce_axis((0, n), name="k")
    C = t.compute((n, n), lambda y, x: t.sum(A[k, y] * B[k, x], axis=k), name="C")
    s = t.create_schedule(C.op)
    CL = s.cache_write(C, vdla.acc_buffer)
    AL = s.cache_read(A, vdla.inp_buffer, [CL])
    BL = s.cache_read(B, vdla.wgt_buffer, [CL])
    y, x = s[C].op.axis
    yo, xo, yi, xi = s[C].tile(y, x, 8, 8)
    s[CL].compute_at(s[C], xo)
    yc, xc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=8)
    s[CL].reorder(ko, yc, xc, ki)
    s[AL].compute_at(s[CL], ko)
    s[BL].compute_at(s[CL], ko)
    s[CL].tensorize(yc, vdla.gemm8x8)
    return s, [A, B, C]


if __name__ == "__main__":
    s, args = seed_program(1024)
    print(ember.lower(s, args, target=vdla))
    f = ember.build(s, args, target=vdla)  # runs on the simulator
    a = np.random.standard_normal((1024, 1024)).astype("float32")
    b = np.random.standard_normal((1024, 1024)).astype("float32")
    c = np.empty((1024, 1024), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-4, atol=1e-3)
    print(f.report())
    if len(sys.argv) > 1:
        f.report().chrome_trace(sys.argv[1])  # open in chrome://tracing or ui.perfetto.dev
