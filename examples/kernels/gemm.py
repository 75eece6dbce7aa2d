"""Tutorial: a 1024x1024x1024 fp32 GEMM, from the tensor expression to fast C.

The first schedule is the classic one of the field's GEMM tutorial (tile, reorder, parallel,
vectorize). The second adds what makes a GEMM fast on a CPU: B packed into 32-column panels,
an 8x32 accumulator tile kept in registers (cache_write "local"), and the reduction outside the
tile. Both are checked against NumPy and timed next to NumPy's BLAS.

    python examples/kernels/gemm.py            # or: make demo
"""

import numpy as np

import ember
from ember import te


def tutorial_schedule(M, N, K):
    """The tutorial's GEMM and schedule, as the field's teaching material writes them."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=32)
    jo, ji = s[C].split(j, factor=32)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(io)
    s[C].vectorize(ji)
    return s, [A, B, C]


def packed_gemm(m: int, n: int, kk: int, mr: int = 8, nr: int = 32):
    """The fast schedule: B packed into nr-column panels, an mr x nr accumulator tile
    (cache_write "local") computed at the output's tile, the reduction outside the tile, and the
    tile unrolled and vectorized so that it lives in registers."""
    a_ = te.placeholder((m, kk), name="A")
    b_ = te.placeholder((kk, n), name="B")
    packed = te.compute((n // nr, kk, nr), lambda x, y, z: b_[y, x * nr + z], name="packedB")
    r = te.reduce_axis((0, kk), name="k")
    c_ = te.compute((m, n), lambda i, j: te.sum(a_[i, r] * packed[j // nr, r, j % nr], axis=r), name="C")
    sch = te.create_schedule(c_.op)
    cc = sch.cache_write(c_, "local")
    io_, jo_, ii_, ji_ = sch[c_].tile(c_.op.axis[0], c_.op.axis[1], mr, nr)
    sch[c_].reorder(jo_, io_, ii_, ji_)
    sch[c_].parallel(jo_)
    sch[c_].unroll(ii_)
    sch[c_].vectorize(ji_)
    sch[cc].compute_at(sch[c_], io_)
    mc, nc = sch[cc].op.axis
    (kc,) = sch[cc].op.reduce_axis
    sch[cc].reorder(kc, mc, nc)
    sch[cc].unroll(mc)
    sch[cc].vectorize(nc)
    x, _, z = sch[packed].op.axis
    sch[packed].vectorize(z)
    sch[packed].parallel(x)
    return sch, [a_, b_, c_]


def main():
    M, N, K = 1024, 1024, 1024
    s, (A, B, C) = tutorial_schedule(M, N, K)
    print(ember.lower(s, [A, B, C]))  # the loop IR, readable
    f = ember.build(s, [A, B, C], target="c")  # compiled with the system C compiler
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    f(a, b, c)
    print(f.source)  # the generated C
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)

    fast = ember.build(*packed_gemm(M, N, K), target="c")
    fast(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    flops = 2.0 * M * N * K
    t_tut = ember.bench(f, a, b, c).median
    t_fast = ember.bench(fast, a, b, c).median
    t_np = ember.bench(np.matmul, a, b).median
    print(f"\nGEMM {M}x{N}x{K} fp32, checked against NumPy")
    print(f"  tutorial schedule: {flops / t_tut / 1e9:7.1f} GFLOP/s  ({t_np / t_tut:5.2f}x NumPy's BLAS)")
    print(f"  packed schedule:   {flops / t_fast / 1e9:7.1f} GFLOP/s  ({t_np / t_fast:5.2f}x NumPy's BLAS)")
    print(f"  NumPy (BLAS):      {flops / t_np / 1e9:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
