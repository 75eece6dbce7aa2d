"""flash_attention, the GPU's fused attention (ember.ops.flash_attention): run on the interpreter
with GPU semantics (blocks and threads shuffled, races checked) against the NumPy reference at
small sizes whose lengths are not multiples of the tiles (several query and key tiles), causal,
additive and bool masks (a row with every key masked out gives 0), on CUDA cores (float32, and
half operands whose head sizes are not multiples of 16) and on Tensor Cores (float16 and
bfloat16, head sizes multiples of 16: the mma.sync kernel, its scores in registers; the wmma
kernel before it, built directly); the kernels compiled by NVRTC to an sm_90 cubin. Symbolic
batch, query and key lengths: one kernel run at each size (one, a partial tile past several, more
queries than keys), causal and masked (a padding mask broadcast over the queries), its grid
computed per launch. The mma kernel (4 warps of 16 queries, the state in registers) against
torch's scaled_dot_product_attention at those sizes in fp16 and bf16 at head sizes 32, 64 and 128:
on the interpreter, and on a GPU where there is one."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.target import Target
from ember.testing import build_op, check_op, check_op_sizes
from ember.tir import dtype as dt

GPU_INTERPRETER = (Target("python", schedules="gpu"),)
RNG = np.random.default_rng()
B, H, L, S = 1, 2, 37, 45  # tiles of 32: two of queries, two of keys


def operands(dtype="float32", e=4, ev=6, heads=H):
    shapes = (B, heads, L, e), (B, heads, S, e), (B, heads, S, ev)
    return [RNG.standard_normal(shape).astype(dt.to_numpy(dtype)) for shape in shapes]


def test_an_additive_mask_broadcast_and_a_scale():
    mask = RNG.standard_normal((B, 1, L, S)).astype("float32")  # broadcast over the heads
    check_op("flash_attention", [*operands(), mask], {"scale": 0.3}, rtol=1e-5, atol=1e-5, targets=GPU_INTERPRETER)


def keep_mask():
    keep = RNG.random((L, S)) < 0.7
    keep[3] = False  # every key of query 3 masked out: 0, as torch gives
    return keep


def test_a_bool_mask_with_causal_and_a_row_of_no_keys():
    (out,) = check_op("flash_attention", [*operands(), keep_mask()], {"causal": True}, rtol=1e-5, atol=1e-5,
                      targets=GPU_INTERPRETER)
    assert out.shape == (B, H, L, 6) and not out[:, :, 3].any()


def test_half_operands_on_cuda_cores_are_computed_in_fp32():
    check_op("flash_attention", operands("float16"), {"causal": True}, rtol=2e-3, atol=2e-3, targets=GPU_INTERPRETER)


@pytest.mark.parametrize("dtype, causal, mask", [("float16", True, "bool"), ("bfloat16", False, "additive")])
def test_on_tensor_cores(dtype, causal, mask):
    q, k, v = operands(dtype, 16, 16, heads=1)
    extra = [keep_mask()] if mask == "bool" else [RNG.standard_normal((L, S)).astype(q.dtype)]
    tol = {"float16": 3e-3, "bfloat16": 1.6e-2}[dtype]  # p rounded to the operands' type; bf16's output 2 ulps
    (out,) = check_op("flash_attention", [q, k, v, *extra], {"causal": causal}, rtol=tol, atol=tol,
                      targets=GPU_INTERPRETER)
    if mask == "bool":
        assert not out[:, :, 3].astype("float32").any()


@needs_nvrtc
@pytest.mark.parametrize("dtype, e", [("float32", 40), ("float16", 64)])
def test_nvrtc_compiles_it_for_sm_90_with_the_tiles_in_shared_memory(dtype, e):
    types = [TensorType((1, 2, 40, e), dtype)] * 3 + [TensorType((40, 40), dtype)]
    f = build_op("flash_attention", types, {"causal": True}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.arch == "sm_90"
    if dtype == "float32":  # CUDA cores, a thread per query: only the k and v tiles take barriers
        assert f.grid == (2, 2, 1) and f.block == (32, 1, 1)
        assert f.source.count("__shared__") == 6 and f.source.count("__syncthreads()") == 2
    else:  # mma.sync, 4 warps of 16 queries: q, s, o and the softmax's state in registers
        assert f.grid == (1, 2, 1) and f.block == (32, 4, 1) and f.registers <= 128
        assert f.source.count("__shared__") == 3  # q, k, v: no scores through shared memory
        for frags in ("q_frag[2]", "s_frag[4]", "o_frag[4]", "state[1]"):
            assert f"ember_wmma_acc {frags};" in f.source
        assert f.source.count("__syncthreads()") == 3  # 1 a tile of keys (the wmma kernel: 4)
        assert f.source.count("cp.async.cg.shared.global") == 4  # k and v: the first tiles, then the next ones
        assert "*reinterpret_cast<uint4*>(&q_tile[" in f.source  # q 16 bytes at a time
        assert f.source.count("ember_mma_attn_softmax_64x64_f16_causal_f16(") == 2  # (its definition, its call)


def test_fewer_warps_a_block_against_the_reference():
    """One warp of 16 queries a block (what the GPU's pass asks where 4 would leave
    multiprocessors idle), causal over several tiles of queries and keys."""
    q, k, v = operands("float16", 32, 32)
    check_op("flash_attention", [q, k, v], {"causal": True, "warps": 1}, rtol=3e-3, atol=3e-3,
             targets=GPU_INTERPRETER)


@needs_nvrtc
@pytest.mark.parametrize("warps, bounds", [(4, "128, 4"), (2, "64, 8"), (1, "32")])
def test_launch_bounds_fit_a_thread_in_128_registers_without_spills(warps, bounds):
    """REGISTER_FILE / (threads * 128) blocks a multiprocessor at head size 64 (unbounded, ptxas
    gives 1 warp 178 registers); one warp and symbolic lengths are left unbounded (128 would
    spill)."""
    from ember.cuda.nvrtc import resources

    types = [TensorType((1, 2, 40, 64), "float16")] * 3 + [TensorType((1, 1, 1, 40), "float16")]
    f = build_op("flash_attention", types, {"warps": warps}, target=Target("cuda", simulate=True)).kernel
    assert f"__launch_bounds__({bounds})" in f.source and f.block == (32, warps, 1)
    (used,) = resources(f.source, f.arch).values()
    assert used.spill_stores == used.spill_loads == 0 and (warps == 1 or used.registers <= 128)
    symbolic = [TensorType(("b", 2, "l", 64), "float16")] * 3  # (bounded, they would spill 8 to 16 bytes)
    f = build_op("flash_attention", symbolic, {"warps": warps}, target=Target("cuda", simulate=True)).kernel
    assert f"__launch_bounds__({32 * warps})" in f.source


def test_an_unknown_count_of_warps_is_refused():
    with pytest.raises(OpTypeError, match="warps must be one of"):
        infer_types("flash_attention", [TensorType((1, 2, 16, 16), "float16")] * 3, {"warps": 3})


@needs_nvrtc
def test_nvrtc_compiles_head_sizes_of_128_in_dynamic_shared_memory():
    types = [TensorType((1, 2, 40, 128), "bfloat16")] * 3
    f = build_op("flash_attention", types, {"causal": False}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.shared == 2 * (64 * 136 + 4 * 64 * 136)  # q, two stages of k and v
    assert "ember_wmma_acc o_frag[8];" in f.source and f.registers <= 255


def extern_kernel(shape, dtype: str, target, kernel_of):
    """A flash attention kernel built directly on (B, H, S, D) operands, `kernel_of(q, k, v, out,
    scale)` its statement on their HeadRows."""
    import math

    import ember
    from ember import te
    from ember.ops.gpu_loops import HeadRows

    q, k, v = (te.placeholder(shape, dtype, name=x) for x in "qkv")
    (out,) = te.extern([(shape, dtype)], [q, k, v], lambda ins, outs: kernel_of(
        *map(HeadRows, ins), HeadRows(outs[0]), 1 / math.sqrt(shape[-1])), name="flash_attention")
    return ember.build(te.create_schedule(out.op), [q, k, v, out], target=target)


def wmma_kernel(shape, dtype: str, causal: bool, target):
    """The wmma kernel (ember.ops.flash_attention_tc: scores through shared memory), which the op
    chooses where the mma kernel does not apply."""
    from ember.ops import flash_attention_tc as tc

    return extern_kernel(shape, dtype, target, lambda q, k, v, out, scale: tc.kernel(
        q, k, v, None, out, scale, causal, 48 * 1024))


def against_torch(f, shape, dtype, causal, tol):
    xs = [RNG.standard_normal(shape).astype(dt.to_numpy(dtype)) for _ in "qkv"]
    out = np.full(shape, np.nan, xs[0].dtype)
    f(*xs, out)
    want = sdpa(*xs, None, causal)
    assert np.linalg.norm(out.astype("float32") - want) <= tol * np.linalg.norm(want)


def test_the_wmma_kernel_against_torch():
    shape = (1, 2, L, 32)
    against_torch(wmma_kernel(shape, "float16", True, GPU_INTERPRETER[0]), shape, "float16", True, 1e-3)


@pytest.mark.parametrize("warps, bn, stages", [(2, 32, 3), (8, 64, 2)])
def test_other_warps_tiles_and_stages_of_the_mma_kernel(warps, bn, stages):
    """What the GPU benchmark times besides the default: 150 causal queries over several tiles."""
    from ember.ops import flash_attention_mma as mma

    shape = (1, 1, 150, 32)
    f = extern_kernel(shape, "bfloat16", GPU_INTERPRETER[0], lambda q, k, v, out, scale: mma.kernel(
        q, k, v, None, out, scale, True, warps, bn, stages=stages))
    against_torch(f, shape, "bfloat16", True, 1e-2)


@needs_nvrtc
def test_nvrtc_compiles_the_wmma_kernel():
    f = wmma_kernel((1, 2, 40, 64), "float16", True, Target("cuda", simulate=True))
    assert f.binary[:4] == b"\x7fELF" and f.grid == (1, 2, 1) and f.block == (32, 4, 1)
    assert "ember_wmma_acc o_frag[4];" in f.source and f.source.count("ember_wmma_fragment_scale((const void*)") == 4
    assert f.source.count("__syncthreads()") == 11  # 4 a tile of keys (none inside a thread's loops)


def test_head_sizes_past_shared_memory_are_refused():
    big = TensorType((1, 1, 8, 512), "float32")
    with pytest.raises(OpTypeError, match="fit the tiles in 49152 bytes of shared memory"):
        infer_types("flash_attention", [big, big, big], {})


# (batch, queries, keys): one each; a partial tile after 4; causal tiles skipped; no keys (0, as torch gives)
SIZES = ((2, 1, 1), (1, 37, 128), (1, 128, 37), (1, 3, 0))


def symbolic_lengths(dtype, e, mask):
    """flash_attention's types over a symbolic batch b and lengths l and s, and inputs at each of SIZES."""
    shapes = ("b", 1, "l", e), ("b", 1, "s", e), ("b", 1, "s", e)
    types = [TensorType(shape, dtype) for shape in shapes]
    if mask == "padding":  # keys kept per key, broadcast over the queries
        types.append(TensorType(("b", 1, 1, "s"), "bool"))
    elif mask == "additive":
        types.append(TensorType(("l", "s"), dtype))

    def inputs(b, l, s):
        xs = [RNG.standard_normal((b, 1, n, e)).astype(dt.to_numpy(dtype)) for n in (l, s, s)]
        if mask == "padding":
            xs.append(RNG.random((b, 1, 1, s)) < 0.7)
        elif mask == "additive":
            xs.append(RNG.standard_normal((l, s)).astype(xs[0].dtype))
        return xs

    return types, [inputs(*size) for size in SIZES]


@pytest.mark.parametrize("dtype, e, mask", [("float32", 4, "causal"), ("float32", 4, "padding"),
                                            ("float16", 16, "additive")])  # (float16 on Tensor Cores)
def test_a_symbolic_batch_and_lengths_one_kernel_at_each_size(dtype, e, mask):
    types, input_sets = symbolic_lengths(dtype, e, mask)
    causal, tol = mask == "causal", {"float32": 1e-5, "float16": 3e-3}[dtype]

    def attention(q, k, v, *m):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, *m, is_causal=causal)

    check_op_sizes("flash_attention", types, {"causal": causal}, input_sets, tol, tol,
                   attention if dtype == "float32" else None, targets=GPU_INTERPRETER)


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nvrtc_compiles_it_over_symbolic_lengths_its_grid_per_launch(dtype):
    types, _ = symbolic_lengths(dtype, 16, "causal")
    f = build_op("flash_attention", types, {"causal": True}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.arch == "sm_90" and f.grid is None  # (the query tiles: per launch)
    assert "int64_t b, int64_t l, int64_t s)" in f.source  # the batch and lengths, parameters of the kernel
    tiles = "(s + 31) / 32, tile + 1)" if dtype == "float32" else "(s + 63) / 64, tile + 1)"  # (64 keys a tile)
    assert f"kt < ember_min_int64({tiles}" in f.source  # causal: no tile past the diagonal


def sdpa(q, k, v, mask, causal):
    """torch's scaled_dot_product_attention in float32 on the (rounded) half inputs, a row of no
    keys 0 as the kernel gives it."""
    t = [torch.from_numpy(x.astype("float32")) for x in (q, k, v)]
    if mask is not None:
        mask = torch.from_numpy(mask)
    out = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=mask, is_causal=causal)
    return np.nan_to_num(out.numpy(), nan=0.0)


@pytest.mark.parametrize("dtype, e, mask, tol", [("float16", 32, "causal", 1e-3), ("bfloat16", 64, "padding", 1e-2),
                                                ("float16", 128, "additive", 1e-3), ("bfloat16", 64, "causal", 1e-2)])
def test_four_warps_state_in_registers_against_torch(dtype, e, mask, tol):
    """The mma kernel (4 warps of 16 queries, 64 keys a tile; the interpreter runs each call lane
    by lane on PTX's layouts), one kernel over symbolic lengths at each of SIZES (128 queries over
    37 keys: tiles inside both, which check no bound, and edge tiles), head sizes 32, 64 and 128:
    ‖out - sdpa‖ / ‖sdpa‖ within tol."""
    types, input_sets = symbolic_lengths(dtype, e, mask)
    causal = mask == "causal"
    kernel = build_op("flash_attention", types, {"causal": causal}, target=GPU_INTERPRETER[0])
    for xs in input_sets:
        (out,) = kernel.run(*xs)
        mask_ = None if len(xs) == 3 else xs[3] if xs[3].dtype == bool else xs[3].astype("float32")
        want = sdpa(*xs[:3], mask_, causal)
        got = out.astype("float32")
        assert got.shape == want.shape
        assert np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1e-30), (xs[0].shape, xs[1].shape)


@needs_gpu
@pytest.mark.parametrize("dtype, mask, tol", [("float16", "causal", 1e-3), ("bfloat16", "padding", 1e-2)])
def test_on_the_gpu_against_torch(dtype, mask, tol):
    """On a GPU: the kernel at a head size of 64 over symbolic lengths, launched at each of SIZES on
    torch CUDA tensors, against torch's scaled_dot_product_attention in float32 on the same
    values (‖out - sdpa‖ / ‖sdpa‖ within tol)."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    from ember.cuda.driver import device

    types, input_sets = symbolic_lengths(dtype, 64, mask)
    causal = mask == "causal"
    f = build_op("flash_attention", types, {"causal": causal}, target=Target("cuda")).kernel
    device().activate()
    for xs in input_sets:
        ts = [torch.from_numpy(x.astype("float32")).cuda().to(getattr(torch, dtype)) for x in xs[:3]]
        ts += [torch.from_numpy(x).cuda() for x in xs[3:]]  # (the padding mask: bool)
        out = torch.full_like(ts[0], float("nan"))
        b, l, s = xs[0].shape[0], xs[0].shape[2], xs[1].shape[2]
        f.launch([t.data_ptr() for t in (*ts, out)], torch.cuda.current_stream().cuda_stream, [b, l, s])
        torch.cuda.synchronize()
        want = sdpa(*xs[:3], xs[3] if len(xs) == 4 else None, causal)
        got = out.float().cpu().numpy()
        assert np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1e-30), (xs[0].shape, xs[1].shape)


def packed(dtype, e, tokens=L, heads=H):
    """A fused QKV projection's output as the attention reads it in place: (1, tokens, 3 heads, e),
    q's heads first, then k's, then v's (layout bshd: each head's rows at the stride of a token's)."""
    return RNG.standard_normal((1, tokens, 3 * heads, e)).astype(dt.to_numpy(dtype))


PACKED = {"layout": "bshd", "heads": (H, 0, H, 2 * H)}


@pytest.mark.parametrize("dtype, e, causal, mask, tol", [("float32", 4, True, "bool", 1e-5),
                                                         ("float16", 16, False, "additive", 3e-3)])
def test_heads_read_in_place_from_a_packed_projection(dtype, e, causal, mask, tol):
    """q, k, v as heads of one packed buffer (ember.passes.fold_qkv_split), the result written
    (1, L, H, Ev) (bshd: the next product's rows): on CUDA cores and on Tensor Cores."""
    x = packed(dtype, e)
    extra = np.ascontiguousarray(keep_mask()[:, :L]) if mask == "bool" else RNG.standard_normal((L, L)).astype(x.dtype)
    (out,) = check_op("flash_attention", [x, x, x, extra], {"causal": causal, **PACKED}, rtol=tol, atol=tol,
                      targets=GPU_INTERPRETER)
    assert out.shape == (1, L, H, e)


@pytest.mark.parametrize("dtype, e", [("float32", 4), ("float16", 16)])
def test_heads_after_the_rows_over_symbolic_tokens(dtype, e):
    """Layout bshd over a symbolic batch and token count (a head split of x (b, t, H * e) folded
    into the kernel), causal, one kernel at each size, against torch on the heads-first copies."""
    types = [TensorType(("b", "t", H, e), dtype)] * 3
    sets = [[RNG.standard_normal((b, t, H, e)).astype(dt.to_numpy(dtype)) for _ in "qkv"] for b, t in ((1, 1), (2, 37))]
    tol = {"float32": 1e-5, "float16": 3e-3}[dtype]

    def attention(q, k, v):
        heads_first = (x.transpose(1, 2).float() for x in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(*heads_first, is_causal=True).transpose(1, 2)

    check_op_sizes("flash_attention", types, {"causal": True, "layout": "bshd"}, sets, tol, tol, attention,
                   targets=GPU_INTERPRETER, torch_atol=tol)


@needs_nvrtc
def test_nvrtc_compiles_the_packed_heads_with_16_byte_copies():
    """On Tensor Cores the packed rows keep cp.async's and uint4's 16-byte copies (a head's
    offset and a token's stride multiples of 8 halves)."""
    types = [TensorType((1, 40, 3 * H, 64), "float16")] * 3
    f = build_op("flash_attention", types, {"causal": True, **PACKED}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.grid == (1, H, 1)
    assert f.source.count("cp.async.cg.shared.global") == 4 and "*reinterpret_cast<uint4*>(&q_tile[" in f.source
