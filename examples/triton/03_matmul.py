"""Matrix multiplication: autotuned block sizes, grouped program order, a fused activation.

Each program computes one BLOCK_SIZE_M x BLOCK_SIZE_N block of C = A @ B, walking K one
BLOCK_SIZE_K slab at a time with `tl.dot` accumulating in float32 (float16 inputs included).

Program order matters for the cache: numbered row by row, consecutive programs share a row of A
but each needs a new column block of B. Grouped ordering numbers GROUP_SIZE_M rows of blocks
column by column instead, so a group of consecutive programs reuses a few blocks of both A and B
while they are still in the cache.

`@triton.autotune` times each config once per (M, N, K) and keeps the fastest; ACTIVATION is a
constexpr string, so the leaky ReLU is compiled into the kernel only when it is asked for.
"""

import numpy as np

import ember.triton as triton
import ember.triton.language as tl


def get_autotune_config():
    return [
        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 4}, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=8),
    ]


@triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    # which block of C this program computes, in grouped order
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)  # the last group may be smaller
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # pointers to the first blocks of A and B; rows and columns past the edge wrap around (% M,
    # % N) so that their loads stay inside, and their results are never stored
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # the last slab of K is masked: zeros add nothing to the dot product
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


def matmul(a: np.ndarray, b: np.ndarray, activation: str = "") -> np.ndarray:
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    c = np.empty((M, N), dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    s = lambda x, axis: x.strides[axis] // x.itemsize  # strides in elements
    matmul_kernel[grid](a, b, c, M, N, K, s(a, 0), s(a, 1), s(b, 0), s(b, 1), s(c, 0), s(c, 1),
                        ACTIVATION=activation)
    return c


def reference(a: np.ndarray, b: np.ndarray, activation: str = "") -> np.ndarray:
    c = a.astype(np.float32) @ b.astype(np.float32)
    return np.where(c >= 0, c, 0.01 * c) if activation == "leaky_relu" else c


def main(M: int = 300, N: int = 260, K: int = 200) -> None:
    rng = np.random.default_rng()
    for dtype, tol in ((np.float16, 2e-2), (np.float32, 1e-4)):
        a = rng.standard_normal((M, K)).astype(dtype)
        b = rng.standard_normal((K, N)).astype(dtype)
        for activation in ("", "leaky_relu"):
            c = matmul(a, b, activation)
            expected = reference(a, b, activation)
            err = float(np.max(np.abs(c.astype(np.float32) - expected) / (1 + np.abs(expected))))
            print(f"matmul ({M}x{K}) @ ({K}x{N}) {np.dtype(dtype).name} {activation or 'no activation'}: "
                  f"max relative difference from NumPy {err:.3g} (config {matmul_kernel.best_config})")
            assert err < tol


if __name__ == "__main__":
    main()
