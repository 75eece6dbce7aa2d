"""Fused attention, forward: softmax(Q K^T * sm_scale) V without the N x N matrix in memory.

Each program owns BLOCK_M query rows of one (batch, head) and streams the keys and values in
blocks of BLOCK_N. The softmax is computed online (the flash-attention recurrence): a running row
max m_i and row sum l_i; when a new block raises the max, the sum and the accumulator so far are
rescaled by exp(m_old - m_new). Exponentials are base 2 with log2(e) folded into the scale. With
CAUSAL, a query attends to keys at or before its position, and the key loop stops at the diagonal.
"""

import math

import numpy as np

import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def _attn_fwd(Q, K, V, Out, sm_scale,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vn, stride_vk,
              stride_oz, stride_oh, stride_om, stride_ok,
              H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    Q += off_z * stride_qz + off_h * stride_qh
    K += off_z * stride_kz + off_h * stride_kh
    V += off_z * stride_vz + off_h * stride_vh
    Out += off_z * stride_oz + off_h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=offs_m[:, None] < N_CTX,
                other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1/ln(2): exp(x) = exp2(x * log2(e))

    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + cols[None, :] * stride_kn + offs_d[:, None] * stride_kk, mask=cols[None, :] < N_CTX,
                    other=0.0)  # K^T: HEAD_DIM x BLOCK_N
        qk = tl.dot(q, k)
        valid = cols[None, :] < N_CTX
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk * qk_scale, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)  # rescales what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk, mask=cols[:, None] < N_CTX,
                    other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok, acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def attention(q, k, v, causal=False, sm_scale=None, block_m=32, block_n=32):
    """q, k, v of shape (batch, heads, n_ctx, head_dim); head_dim a power of 2."""
    Z, H, N_CTX, HEAD_DIM = q.shape
    sm_scale = 1 / math.sqrt(HEAD_DIM) if sm_scale is None else sm_scale
    o = np.empty_like(q)
    s = lambda x: [st // x.itemsize for st in x.strides]  # strides in elements
    grid = (triton.cdiv(N_CTX, block_m), Z * H)
    _attn_fwd[grid](q, k, v, o, sm_scale, *s(q), *s(k), *s(v), *s(o), H, N_CTX, HEAD_DIM=HEAD_DIM,
                    BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal)
    return o


def reference(q, k, v, causal=False, sm_scale=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    sm_scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = q @ np.swapaxes(k, -1, -2) * sm_scale
    if causal:
        n = q.shape[-2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def main(Z: int = 2, H: int = 3, N_CTX: int = 200, HEAD_DIM: int = 64) -> None:
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((Z, H, N_CTX, HEAD_DIM)).astype(np.float16) for _ in range(3))
    for causal in (False, True):
        err = float(np.max(np.abs(attention(q, k, v, causal).astype(np.float64) - reference(q, k, v, causal))))
        print(f"fused attention ({Z}, {H}, {N_CTX}, {HEAD_DIM}) float16 causal={causal}: max abs difference from "
              f"NumPy {err:.3g}")
        assert err < 2e-2


if __name__ == "__main__":
    main()
