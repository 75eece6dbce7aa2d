"""The tile language compiled to C, kernel by kernel, against NumPy: fresh random data, sizes the
blocks do not divide, explicit tolerances."""

import numpy as np
import pytest

import ember.triton as triton
import ember.triton.language as tl


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.delenv("EMBER_INTERPRET", raising=False)
    mp.delenv("TRITON_INTERPRET", raising=False)
    yield
    mp.undo()


rng = np.random.default_rng()


def cdiv(a, b):
    return -(-a // b)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("n", [1, 97, 4096, 10007])
def test_vector_add(n):
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.full_like(x, np.nan)
    add_kernel[(cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


@triton.jit
def strided_add_kernel(x_ptr, sx, y_ptr, sy, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * sx, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs * sy, mask=mask), mask=mask)


def test_torch_tensors_and_strides():
    torch = pytest.importorskip("torch")
    x = torch.rand(300, 3)[:, 1]  # a strided view: every third element
    y = np.random.default_rng().random(300).astype(np.float32)[::-1]  # a negative stride
    out = torch.empty(300)
    strided_add_kernel[(cdiv(300, 128),)](x, x.stride(0), y, -1, out, 300, BLOCK=128)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y, rtol=1e-6)
    add_kernel[(cdiv(300, 128),)](x.contiguous(), torch.from_numpy(y.copy()), out, 300, BLOCK=128)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y, rtol=1e-6)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, num / den, mask=mask)


@pytest.mark.parametrize("cols", [5, 64, 781])
def test_softmax(cols):
    x = rng.standard_normal((13, cols), dtype=np.float32)
    out = np.full_like(x, np.nan)
    softmax_kernel[(13,)](out, x, x.shape[1], out.shape[1], cols, BLOCK=triton_next_pow2(cols))
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def triton_next_pow2(n):
    return 1 << (n - 1).bit_length()


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    if ACT == "leaky_relu":
        acc = leaky_relu(acc)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@pytest.mark.parametrize("dtype,act", [("float32", ""), ("float16", "leaky_relu")])
def test_matmul(dtype, act):
    M, N, K = 70, 45, 83
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = np.full((M, N), np.nan, dtype=np.float32)
    matmul_kernel[(cdiv(M, 32), cdiv(N, 16))](a, b, c, M, N, K, K, 1, N, 1, N, 1,
                                              BM=32, BN=16, BK=16, ACT=act)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if act:
        ref = np.where(ref >= 0, ref, 0.01 * ref)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-3)


@triton.jit
def reduce_kernel(x_ptr, s_ptr, mx_ptr, mn_ptr, am_ptr, an_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.arange(0, BR)
    c = tl.arange(0, BC)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :], mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
    tl.store(s_ptr + c, tl.sum(x, axis=0), mask=c < C)
    tl.store(mx_ptr + r, tl.max(x, axis=1), mask=r < R)
    tl.store(mn_ptr + c, tl.min(x, axis=0), mask=c < C)
    tl.store(am_ptr + r, tl.argmax(x, axis=1), mask=r < R)
    tl.store(an_ptr + c, tl.argmin(x, axis=0), mask=c < C)


def test_reductions():
    R, C = 5, 13
    x = rng.standard_normal((R, C)).astype(np.float32)
    s, mn, an = (np.full(C, -1, d) for d in ("float32", "float32", "int32"))
    mx, am = np.full(R, -1, "float32"), np.full(R, -1, "int32")
    reduce_kernel[(1,)](x, s, mx, mn, am, an, R, C, BR=8, BC=16)
    padded = np.pad(x, ((0, 3), (0, 3)))  # masked lanes load 0.0, as in the kernel
    np.testing.assert_allclose(s, x.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx, padded[:R].max(1))
    np.testing.assert_array_equal(mn, padded[:, :C].min(0))
    np.testing.assert_array_equal(am, padded[:R].argmax(1))
    np.testing.assert_array_equal(an, padded[:, :C].argmin(0))


@triton.jit
def math_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    if FN == "exp":
        y = tl.exp(x)
    elif FN == "exp2":
        y = tl.exp2(x)
    elif FN == "log":
        y = tl.log(tl.abs(x) + 1.0)
    elif FN == "log2":
        y = tl.log2(tl.abs(x) + 1.0)
    elif FN == "sqrt":
        y = tl.sqrt(tl.abs(x))
    elif FN == "rsqrt":
        y = tl.rsqrt(tl.abs(x) + 0.5)
    elif FN == "sigmoid":
        y = tl.sigmoid(x)
    elif FN == "erf":
        y = tl.erf(x)
    elif FN == "tanh":
        y = tl.tanh(x)
    elif FN == "where":
        y = tl.where(x > 0, tl.maximum(x, 0.5), tl.minimum(x, -0.25))
    else:
        y = (x * 3).to(tl.int32).to(tl.float32) + tl.floor(x) - x % 1.0
    tl.store(out_ptr + offs, y, mask=offs < n)


MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": lambda x: np.log(np.abs(x) + 1), "log2": lambda x: np.log2(np.abs(x) + 1),
    "sqrt": lambda x: np.sqrt(np.abs(x)), "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 0.5),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
    "where": lambda x: np.where(x > 0, np.maximum(x, 0.5), np.minimum(x, -0.25)),
    "cast": lambda x: (x * 3).astype(np.int32).astype(np.float32) + np.floor(x) - np.fmod(x, 1.0),  # C's %
}


@pytest.mark.parametrize("fn", [*MATH, "erf"])
def test_math(fn):
    n = 300
    x = (rng.standard_normal(n) * 2).astype(np.float32)
    out = np.full_like(x, np.nan)
    math_kernel[(cdiv(n, 64),)](x, out, n, FN=fn, BLOCK=64)
    if fn == "erf":
        import math

        ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    else:
        ref = MATH[fn](x.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-5)


@triton.jit
def control_kernel(x_ptr, out_ptr, n, steps, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    total = 0.0
    for i in range(steps):  # a run-time trip count
        acc += x * i
        total += 1.0
    for j in tl.static_range(UNROLL):
        acc = acc + j
    if pid % 2 == 0:  # a run-time branch
        acc = acc * 2.0
    else:
        acc = acc - 1.0
    tl.store(out_ptr + offs, acc + total, mask=offs < n)


def test_loops_and_branches():
    n, steps = 200, 5
    x = rng.random(n, dtype=np.float32)
    out = np.full_like(x, np.nan)
    control_kernel[(cdiv(n, 32),)](x, out, n, steps, BLOCK=32, UNROLL=3)
    acc = x * sum(range(steps)) + 3.0
    pid = np.arange(n) // 32
    ref = np.where(pid % 2 == 0, acc * 2, acc - 1) + steps
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@triton.jit
def block_ptr_kernel(x_ptr, out_ptr, M, N, sm, sn, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(sm, sn), offsets=(pid * BM, 0), block_shape=(BM, BN),
                            order=(1, 0))
    dst = tl.make_block_ptr(out_ptr, shape=(M, N), strides=(N, 1), offsets=(pid * BM, 0), block_shape=(BM, BN),
                            order=(1, 0))
    for _ in range(tl.cdiv(N, BN)):
        tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
        tl.store(dst, tile * 2.0, boundary_check=(0, 1))
        src = tl.advance(src, (0, BN))
        dst = tl.advance(dst, (0, BN))


def test_block_pointers_in_loop():
    M, N = 19, 37
    x = rng.random((N, M), dtype=np.float32).T  # transposed: strides (1, M)
    out = np.full((M, N), np.nan, np.float32)
    block_ptr_kernel[(cdiv(M, 8),)](x, out, M, N, 1, M, BM=8, BN=16)
    np.testing.assert_allclose(out, x * 2)


@triton.jit
def block_ptr_once(x_ptr, out_ptr, M, N, sm, sn, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(sm, sn), offsets=(pid * BM, 0), block_shape=(BM, BN),
                            order=(1, 0))
    src = tl.advance(src, (0, 0))
    tile = tl.load(src, boundary_check=(0, 1))
    offs_m = pid * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], tile + 1.0,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_block_pointers():
    M, N = 19, 13
    x = rng.random((N, M), dtype=np.float32).T
    out = np.full((M, N), np.nan, np.float32)
    block_ptr_once[(cdiv(M, 8),)](x, out, M, N, 1, M, BM=8, BN=16)
    np.testing.assert_allclose(out, x + 1)


@triton.jit
def lock_kernel(x_ptr, out_ptr, lock_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    s = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(out_ptr, tl.load(out_ptr) + s)  # guarded by the lock: no update is lost
    tl.atomic_xchg(lock_ptr, 0)
    tl.atomic_add(out_ptr + 1, s)
    tl.atomic_max(out_ptr + 2, s)
    tl.atomic_add(out_ptr + 3 + tl.arange(0, 2), 1.0)


def test_atomics_and_spin_lock():
    n = 20000
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(5, np.float32)
    lock = np.zeros(1, np.int32)
    programs = cdiv(n, 64)
    lock_kernel[(programs,)](x, out, lock, n, BLOCK=64)
    sums = np.add.reduceat(x.astype(np.float64), np.arange(0, n, 64))
    np.testing.assert_allclose(out[:3], [x.sum(dtype=np.float64)] * 2 + [sums.max()], rtol=1e-4)
    np.testing.assert_array_equal(out[3:], [programs, programs])
    assert lock[0] == 0


@triton.jit
def twod_kernel(x_ptr, out_ptr, R, C, sr, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + rows[:, None] * sr + cols[None, :], mask=mask, other=0.0)
    y = tl.trans(x)
    tl.store(out_ptr + cols[:, None] * R + rows[None, :], y + tl.sum(x, axis=1)[None, :],
             mask=tl.trans(mask))


def test_broadcast_and_transpose():
    R, C = 11, 6
    x = rng.random((R, C), dtype=np.float32)
    out = np.full((C, R), np.nan, np.float32)
    twod_kernel[(cdiv(R, 4),)](x, out, R, C, C, BR=4, BC=8)
    np.testing.assert_allclose(out, x.T + x.sum(1)[None, :], rtol=1e-5)


@triton.jit
def int_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    y = (x * 3 + 7) // 4 - x % 5
    tl.store(out_ptr + offs, tl.where(x > 10, y, -y).to(tl.int64), mask=offs < n)


def test_integers():
    n = 100
    x = rng.integers(0, 100, n).astype(np.int32)
    out = np.zeros(n, np.int64)
    int_kernel[(cdiv(n, 32),)](x, out, n, BLOCK=32)
    y = (x * 3 + 7) // 4 - x % 5
    np.testing.assert_array_equal(out, np.where(x > 10, y, -y))


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start = tl.program_id(0) * BM
    head = tl.program_id(1) * S * D
    rm = start + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + head + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for j in range(0, tl.cdiv(S, BN)):
        rn = j * BN + tl.arange(0, BN)
        k = tl.load(k_ptr + head + rn[None, :] * D + rd[:, None], mask=rn[None, :] < S, other=0.0)
        s = tl.where(rn[None, :] < S, tl.dot(q, k) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + head + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(o_ptr + head + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < S)


def test_fused_attention():
    H, S, D = 2, 75, 32
    q, k, v = (rng.standard_normal((H, S, D), dtype=np.float32) for _ in range(3))
    o = np.full_like(q, np.nan)
    attention_kernel[(cdiv(S, 16), H)](q, k, v, o, S, D ** -0.5, D=D, BM=16, BN=32)
    s = q.astype(np.float64) @ k.transpose(0, 2, 1) * D ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o, p / p.sum(-1, keepdims=True) @ v, rtol=1e-4, atol=1e-5)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, Lock, Count, stride, N, eps, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    _mean = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    rstd = 1 / tl.sqrt(tl.sum(_var, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)
    lock_id = row % GROUP
    Lock += lock_id
    Count += lock_id
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        tl.store(Count, count + 1)
    tl.atomic_xchg(Lock, 0)


def test_layer_norm_with_lock():
    M, N, group = 37, 300, 4
    x = rng.standard_normal((M, N)).astype(np.float16)
    w, b = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    y = np.full((M, N), np.nan, np.float16)
    mean, rstd = np.empty(M, np.float32), np.empty(M, np.float32)
    lock, count = np.zeros(group, np.int32), np.zeros(group, np.int32)
    layer_norm_fwd[(M,)](x, y, w, b, mean, rstd, lock, count, N, N, 1e-5, BLOCK=128, GROUP=group)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(mean, x32.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(x32.var(1) + 1e-5), rtol=1e-4)
    ref = (x32 - x32.mean(1, keepdims=True)) / np.sqrt(x32.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(count, np.bincount(np.arange(M) % group))
    np.testing.assert_array_equal(lock, 0)


@triton.jit
def gather_walk_kernel(x_ptr, idx_ptr, out_ptr, steps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptrs = x_ptr + offs  # advanced by a different offset per element: kept in memory
    acc = tl.zeros((BLOCK,), tl.float32)
    for _ in range(steps):
        acc += tl.load(ptrs)
        ptrs = ptrs + tl.load(idx_ptr + offs)
    tl.store(out_ptr + offs, acc)


def test_pointer_blocks_with_varying_steps():
    block, steps = 16, 3
    step = rng.integers(0, 4, block).astype(np.int32)
    x = rng.random(block + steps * 4, dtype=np.float32)
    out = np.zeros(block, np.float32)
    gather_walk_kernel[(1,)](x, step, out, steps, BLOCK=block)
    ref = sum(x[np.arange(block) + i * step] for i in range(steps))
    np.testing.assert_allclose(out, ref, rtol=1e-6)


@triton.jit
def bits_scan_kernel(x_ptr, out_ptr, cs_ptr, cp_ptr, cat_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid > 0:  # the early-return idiom: only program 0 works
        return
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, (x << 2) + (x >> 1) + (x & 7) + ~x, mask=offs < n)
    tl.store(cs_ptr + offs, tl.cumsum(x, axis=0), mask=offs < n)
    f = (x % 3 + 1).to(tl.float32)
    tl.store(cp_ptr + offs, tl.cumprod(f, axis=0, reverse=True), mask=offs < n)
    tl.store(cat_ptr + tl.arange(0, 2 * BLOCK), tl.cat(x, x * 10))


def test_bits_scans_cat_and_early_return():
    n, block = 10, 16
    x = rng.integers(-50, 50, n).astype(np.int32)
    out, cs = np.zeros(n, np.int32), np.zeros(n, np.int32)
    cp, cat = np.zeros(n, np.float32), np.zeros(2 * block, np.int32)
    bits_scan_kernel[(3,)](x, out, cs, cp, cat, n, BLOCK=block)
    np.testing.assert_array_equal(out, (x << 2) + (x >> 1) + (x & 7) + ~x)
    np.testing.assert_array_equal(cs, np.cumsum(x))
    xp = np.pad(x, (0, block - n))
    f = (np.fmod(xp, 3) + 1).astype(np.float64)  # C's % (Triton's srem): the sign of x
    np.testing.assert_allclose(cp, np.cumprod(f[::-1])[::-1][:n], rtol=1e-6)
    np.testing.assert_array_equal(cat, np.concatenate([xp, xp * 10]))


@triton.jit
def grid_kernel(out_ptr, SCALE: tl.constexpr):
    tl.static_assert(SCALE > 0, "SCALE is positive")
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nx, ny = tl.num_programs(0), tl.num_programs(1)
    flat = (z * ny + y) * nx + x
    tl.debug_barrier()
    tl.store(out_ptr + flat * 4 + tl.arange(0, 4), tl.full((4,), SCALE, tl.int32) * flat + tl.arange(0, 4))


def test_grid_programs_and_launch_options():
    out = np.full(2 * 3 * 4 * 4, -1, np.int32)
    grid_kernel[lambda meta: (2, 3, 4)](out, SCALE=10, num_warps=8, num_stages=3)
    flat = np.arange(24)
    np.testing.assert_array_equal(out.reshape(24, 4), flat[:, None] * 10 + np.arange(4))


@triton.jit
def wrapped_rows_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = (tl.program_id(0) * BM + tl.arange(0, BM)) % M  # Triton's matmul: wrapped rows need no mask
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * BM * BN + tl.arange(0, BM)[:, None] * BN + rn[None, :], x * 3.0)


def test_wrapped_offsets():
    M, N, bm, bn = 13, 10, 4, 16
    x = rng.random((M, N), dtype=np.float32)
    programs = cdiv(M, bm)
    out = np.full((programs * bm, bn), np.nan, np.float32)
    wrapped_rows_kernel[(programs,)](x, out, M, N, BM=bm, BN=bn)
    rows = np.arange(programs * bm) % M
    np.testing.assert_allclose(out, np.pad(x, ((0, 0), (0, bn - N)))[rows] * 3.0)


@triton.jit
def swap_kernel(x_ptr, out_ptr, steps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    b = a * 10.0
    total = tl.zeros((BLOCK,), tl.float32)
    for _ in range(steps):
        a, b = b, a  # each new value is the other's buffer
        total = total * 0.5 + a  # in place: reads its own element only
    tl.store(out_ptr + offs, total)


def test_loop_carried_swap_and_in_place_update():
    x = rng.random(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    swap_kernel[(1,)](x, out, 5, BLOCK=16)
    a, b, total = x.astype(np.float64), x * 10.0, np.zeros(16)
    for _ in range(5):
        a, b = b, a
        total = total * 0.5 + a
    np.testing.assert_allclose(out, total, rtol=1e-5)
