"""Layer normalization, forward and backward.

Forward: one program per row; the row is read in BLOCK_SIZE pieces to find its mean and
variance in float32, then once more to write y = (x - mean) * rstd * w + b. The mean and 1/std
of each row are kept for the backward.

Backward: dx needs only its own row, so one program per row computes it. dw and db are sums over
all rows: each program adds its row's share into one of GROUP_SIZE_M partial sums, chosen by its
row, under a lock (`atomic_cas` takes it, `atomic_xchg` gives it back; a count says whether the
partial sum is still empty). A second kernel then adds up the GROUP_SIZE_M partial sums per
column. Programs that run at the same time mostly take different locks.
"""

import numpy as np

import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N,
                             GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    # the lock and partial sums this row adds into
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    # dx
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.0)
    wdy = tl.where(mask, wdy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    # this row's share of dw and db, added into the partial sums under the lock
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:  # the first row here: the partial sums are not written yet
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.0)
        db += tl.load(DB + offs, mask=mask, other=0.0)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def layer_norm_forward(x, w, b, eps=1e-5, block_size=None):
    """y, and the (mean, rstd) of each row the backward needs."""
    M, N = x.shape
    y = np.empty_like(x)
    mean = np.empty(M, np.float32)
    rstd = np.empty(M, np.float32)
    block_size = block_size or min(1024, triton.next_power_of_2(N))
    _layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, x.strides[0] // x.itemsize, N, eps, BLOCK_SIZE=block_size)
    return y, mean, rstd


def layer_norm_backward(dy, x, w, mean, rstd, group_size_m=None):
    """dx, dw, db."""
    M, N = x.shape
    group_size_m = group_size_m or (64 if N <= 8192 else 32 if N <= 4096 else 16)
    locks = np.zeros(2 * group_size_m, np.int32)  # the locks, then the counts
    partial_dw = np.zeros((group_size_m, N), w.dtype)
    partial_db = np.zeros((group_size_m, N), w.dtype)
    dx, dw, db = np.empty_like(dy), np.empty_like(w), np.empty_like(w)
    block_n = triton.next_power_of_2(N)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, partial_dw, partial_db, x, w, mean, rstd, locks,
                                   x.strides[0] // x.itemsize, N, GROUP_SIZE_M=group_size_m, BLOCK_SIZE_N=block_n)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
    _layer_norm_bwd_dwdb[grid](partial_dw, partial_db, dw, db, min(group_size_m, M), N, BLOCK_SIZE_M=32,
                               BLOCK_SIZE_N=128)
    return dx, dw, db


def reference(x, w, b, dy, eps=1e-5):
    """y, dx, dw, db in float64 NumPy."""
    x, w, b, dy = (v.astype(np.float64) for v in (x, w, b, dy))
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    wdy = w * dy
    dx = (wdy - xhat * (xhat * wdy).mean(axis=1, keepdims=True) - wdy.mean(axis=1, keepdims=True)) * rstd
    return xhat * w + b, dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def main(M: int = 1151, N: int = 1000) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((M, N), dtype=np.float32)
    w, b = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    dy = 0.1 * rng.standard_normal((M, N), dtype=np.float32)
    y, mean, rstd = layer_norm_forward(x, w, b)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd)
    for name, got, want in zip(("y", "dx", "dw", "db"), (y, dx, dw, db), reference(x, w, b, dy)):
        err = float(np.max(np.abs(got - want) / (1 + np.abs(want))))
        print(f"layer norm ({M}, {N}) {name}: max relative difference from NumPy {err:.3g}")
        assert err < 1e-4


if __name__ == "__main__":
    main()
