"""The parts of benchmarks/cuda_kernels.py that time kernels as the CUDA target schedules a
model's operators by default (ember.schedules.gpu): operators, a model's products in fp16 and
fp32, those in other tiles than the default's, built for a symbolic number of tokens and split
over K, each next to torch. A part appends its rows (kernel, implementation, seconds, GB/s or
TFLOP/s, build seconds or None for a peer) to `rows`."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cuda_timing import build, graph_time, operator_kernel, timed, timed_graph  # noqa: E402

# operators with the GPU family's default schedules (ember.schedules.gpu), as a model's kernels get them:
# (operator, input shapes, dtype, attributes, the torch function, GB/s (True) or TFLOP/s (False))
DEFAULTS = (("softmax", ((4096, 4096),), "float32", {"axis": 1}, lambda x: x.softmax(1), True),
            ("layer_norm", ((4096, 4096), (4096,), (4096,)), "float32", {"normalized_ndim": 1, "eps": 1e-5},
             lambda x, g, b: _functional().layer_norm(x, (x.shape[-1],), g, b, 1e-5), True),
            ("sum", ((4096, 4096),), "float32", {"axes": [1]}, lambda x: x.sum(1), True),
            # a whole tensor to one value (a loss) in one block, as below 2^18 elements (the split's: `whole_sums`)
            ("sum", ((1 << 20,),), "float32", {}, lambda x: x.sum(), True),
            ("sum", ((4096, 4096),), "float32", {}, lambda x: x.sum(), True),
            ("gelu", ((4096, 4096),), "float32", {}, lambda x: _functional().gelu(x), True),
            ("global_avg_pool", ((1, 512, 7, 7),), "float16", {}, lambda x: x.mean((2, 3), keepdim=True), True),
            ("matmul", ((4096, 4096), (4096, 4096)), "float32", {}, lambda a, b: a @ b, False),
            ("matmul", ((4096, 4096), (4096, 4096)), "float16", {}, lambda a, b: a @ b, False))


def _functional():
    import torch

    return torch.nn.functional


def defaults(n: int, runs: int, rows: list) -> None:
    """The operators of DEFAULTS as the CUDA target schedules them by default, against torch."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    for op, shapes, dtype, attrs, torch_fn, memory_bound in DEFAULTS:
        name = f"default {op} {dtype}"
        try:
            f, outs, build_s = operator_kernel(op, shapes, dtype, attrs)
            xs = [torch.randn(shape, device="cuda").to(getattr(torch, dtype)) for shape in shapes]
            ys = [torch.empty(tuple(int(d) for d in t.shape), device="cuda", dtype=getattr(torch, t.dtype))
                  for t in outs]
            f(*xs, *ys)
            torch.testing.assert_close(ys[0].float(), torch_fn(*xs).float(), rtol=2e-2, atol=2e-2)
            work = (sum(x.numel() * x.element_size() for x in (*xs, *ys)) / 1e9 if memory_bound
                    else 2 * shapes[0][0] * shapes[0][1] * shapes[1][1] / 1e12)
            t = timed(lambda f=f, xs=xs, ys=ys: f(*xs, *ys), runs)
            rows.append((name, f"ember grid {f.grid} block {f.block}", t, work / t, build_s))
            t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
            rows.append((name, "torch", t, work / t, None))
        except Exception:  # one operator's failure must not hide the others'
            print(f"--- {name} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    whole_sums(runs, rows)


WHOLE_SUMS = (1 << 20, 1 << 24)  # float32 elements summed to one value
PARTS_PER_SM = (1, 2, 4, 8)  # the candidates for ember.passes.split_reduce.PARTS_PER_SM


def whole_sums(runs: int, rows: list) -> None:
    """A whole tensor's sum as ember.passes.split_reduce makes it for a large one: reduce_parts
    (a block a part) then the sum of the partials (one block), at each candidate count of parts a
    multiprocessor, the pair timed back to back, against torch (the one block: `defaults`' rows);
    the best count printed."""
    import torch

    from ember.passes.split_reduce import PARTS_PER_SM as DEFAULT
    from ember.target import Target

    sms = Target("cuda").gpu.multiprocessors
    for n in WHOLE_SUMS:
        name = f"sum of {n} float32 to one value, two kernels"
        x = torch.randn(n, device="cuda")
        want, best = x.double().sum(), None
        for per_sm in PARTS_PER_SM:
            try:
                parts, f_s = operator_kernel("reduce_parts", [(n,)], "float32", {"kind": "sum", "parts": per_sm * sms})
                total, _, g_s = operator_kernel("sum", [(per_sm * sms,)], "float32", {})
                p, y = torch.empty(per_sm * sms, device="cuda"), torch.empty((), device="cuda")

                def both(x=x, parts=parts, total=total, p=p, y=y):
                    parts(x, p)
                    total(p, y)

                both()
                assert abs(float(y) - float(want)) <= 1e-6 * float(x.abs().sum()), (float(y), float(want))
                t = timed(both, runs)
                rows.append((name, f"ember {per_sm} parts a multiprocessor{' (default)' if per_sm == DEFAULT else ''}",
                             t, 4 * n / 1e9 / t, f_s + g_s))
                best = min(best or (t, per_sm), (t, per_sm))
            except Exception:  # one candidate's failure must not hide the others'
                print(f"--- {name}, {per_sm} parts a multiprocessor, failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda x=x: x.sum(), runs)
        rows.append((name, "torch", t, 4 * n / 1e9 / t, None))
        if best is not None:
            print(f"{name}: best {best[1]} parts a multiprocessor ({best[1] * sms} blocks), {best[0] * 1e6:.1f} us; "
                  f"torch {t * 1e6:.1f} us")


# the scans' shapes (rows, row length, dtype): many rows, GPT-2's position ids over 1024 tokens, a few long rows
SCAN_SHAPES = ((4096, 4096, "float32"), (1, 1024, "int64"), (4, 1 << 20, "float32"))
SCAN_PER_THREAD = (1, 2, 4, 8)  # the candidates for ember.schedules.gpu.scan.PER_THREAD


def scans(n: int, runs: int, rows: list) -> None:
    """cumsum along the last axis (ember.schedules.gpu.scan) with each candidate count of
    consecutive elements a thread, against torch.cumsum; the best count of each shape printed."""
    import torch

    from ember.schedules.gpu.scan import PER_THREAD

    for m, length, dtype in SCAN_SHAPES:
        name = f"cumsum {m}x{length} {dtype}"
        x = (torch.randn(m, length, device="cuda") * 4).to(getattr(torch, dtype))
        ref = x.cumsum(1)
        work = 2 * x.numel() * x.element_size() / 1e9
        best = None
        for e in SCAN_PER_THREAD:
            try:
                f, build_s = build(lambda e=e, shape=(m, length), dtype=dtype: _scan_kernel(shape, dtype, e))
                y = torch.empty_like(x)
                f(x, y)
                torch.testing.assert_close(y.double(), ref.double(), rtol=1e-3, atol=1e-2 * length ** 0.5)
                t = timed(lambda f=f, x=x, y=y: f(x, y), runs)
                rows.append((name, f"ember {e} a thread{' (default)' if e == PER_THREAD else ''}", t, work / t,
                             build_s))
                best = min(best or (t, e), (t, e))
            except Exception:  # one candidate's failure must not hide the others'
                print(f"--- {name}, {e} a thread, failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda x=x: x.cumsum(1), runs)
        rows.append((name, "torch", t, work / t, None))
        if best is not None:
            print(f"{name}: best {best[1]} elements a thread, {best[0] * 1e3:.3f} ms; torch {t * 1e3:.3f} ms")


def _scan_kernel(shape, dtype: str, per_thread: int):
    """(the te schedule, its arguments) of cumsum along the last axis, `per_thread` elements a thread."""
    from ember import te
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.gpu.scan import scan_compute

    attrs = {"axis": len(shape) - 1, "exclusive": False, "reverse": False}
    _, outs = infer_types("cumsum", [TensorType(shape, dtype)], attrs)
    x = te.placeholder(shape, dtype, name="x")
    (out,) = scan_compute("cumsum", per_thread)([x], attrs, outs)
    return te.create_schedule(out.op), [x, out]


# the row kernels (ember.schedules.gpu.rows) at a large shape and BERT-base's (128 tokens of 768): (operator,
# extra inputs' shapes from the row length, attributes, torch's function)
ROW_OPS = (("softmax", lambda m: [], {"axis": -1}, lambda x: x.softmax(-1)),
           ("layer_norm", lambda m: [(m,), (m,)], {"normalized_ndim": 1, "eps": 1e-5},
            lambda x, g, b: _functional().layer_norm(x, (x.shape[-1],), g, b, 1e-5)),
           ("rms_norm", lambda m: [(m,)], {"normalized_ndim": 1, "eps": 1e-5},
            lambda x, g: _functional().rms_norm(x, (x.shape[-1],), g, 1e-5)))
# the variants timed beside the default, (threads a row, where the row is kept, rows a block), per row length
ROW_VARIANTS = {4096: ((256, "shared", 1), (256, "global", 1), (128, None, 1), (512, None, 1), (1024, None, 1)),
                768: ((192, "shared", 1), (192, "global", 1), (64, None, 1), (96, None, 1), (32, None, 4),
                      (32, None, 8), (64, None, 4))}


def row_kernels(n: int, runs: int, rows: list) -> None:
    """The row kernels of ROW_OPS at n x n, n x 768 (BERT-base's rows at a batch of 32 x 128 tokens)
    and 128 x 768 (one sequence), as the CUDA target schedules them by default
    and in the variants of ROW_VARIANTS (threads a row; the row kept in registers, shared memory, or
    read again from global memory by each phase; several rows a block, a warp each), against torch and
    the device copy of the same shape (GB/s: the input read and the output written once). Each is
    timed as 20 launches in a CUDA graph (`timed_graph`: the GPU's time, without the host's between
    launches); ember's kernels through `launch` on the device addresses."""
    import torch

    import ember
    from ember.cuda.driver import device
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.schedules.gpu.rows import row_blocks
    from ember.target import Target

    target = Target("cuda")
    device().activate()  # (`launch`, unlike a call, expects the context current)
    for shape in ((n, n), (n, 768), (128, 768)):
        label = f"{shape[0]}x{shape[1]}"
        x, y = torch.randn(shape, device="cuda") * 3 + 1, torch.empty(shape, device="cuda")
        gb = 2 * x.numel() * 4 / 1e9
        copy_s, graphed = timed_graph(lambda x=x, y=y: y.copy_(x), runs)
        rows.append((f"device copy {label}", f"torch copy_{'' if graphed else ' (no graph)'}", copy_s, gb / copy_s,
                     None))
        for op, params, attrs, torch_fn in ROW_OPS:
            xs = [x, *(torch.randn(p, device="cuda") for p in params(shape[1]))]
            types = [TensorType(tuple(a.shape), "float32") for a in xs]
            bound, outs = infer_types(op, types, attrs)
            expected = torch_fn(*xs)
            pointers = [a.data_ptr() for a in (*xs, y)]
            for threads, scope, per_block in ((None, None, 1), *ROW_VARIANTS.get(shape[1], ())):
                impl = (f"ember {'default' if threads is None else f'{threads}t'} {scope or ''}".rstrip()
                        + (f", {per_block} rows a block" if per_block > 1 else ""))
                try:
                    t0 = time.perf_counter()
                    s, args = node_kernel(op, types, bound, outs, schedule=False, target=target)
                    row_blocks(s, args[-1], target, threads, scope, per_block)
                    f = ember.build(s, args, target="cuda")
                    build_s = time.perf_counter() - t0
                    held = "registers" if "in0_local[" in f.source else "shared" if "in0_shared[" in f.source \
                        else "global"
                    y.zero_()
                    f(*xs, y)
                    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)
                    t, graphed = timed_graph(
                        lambda f=f, p=pointers: f.launch(p, torch.cuda.current_stream().cuda_stream), runs)
                    rows.append((f"{op} {label}", f"{impl}: {f.block[0]}x{f.block[1]}t, {held}"
                                 f"{'' if graphed else ' (no graph)'}", t, gb / t, build_s))
                except Exception:  # one variant's failure must not hide the others'
                    print(f"--- {op} {label} {impl} failed:")
                    traceback.print_exc(limit=6, file=sys.stdout)
            t, graphed = timed_graph(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
            rows.append((f"{op} {label}", f"torch{'' if graphed else ' (no graph)'}", t, gb / t, None))
            ours = [r for r in rows if r[0] == f"{op} {label}" and r[4] is not None]
            if ours:
                best = min(ours, key=lambda r: r[2])
                print(f"{op} {label}: best {best[1]} {best[2] * 1e3:.4f} ms, {copy_s / best[2]:.0%} of the copy's "
                      f"bandwidth (torch {copy_s / t:.0%}), {t / best[2]:.2f}x torch's speed", flush=True)


# a model's products as the CUDA target schedules them (ember.schedules.gpu.matmul: Tensor Cores at any shape
# in fp16, CUDA cores in fp32, the bias fused): (name, operator, input shapes, attributes, torch's function on the
# same inputs, the types it runs in)
FP16, BOTH = ("float16",), ("float16", "float32")
PRODUCTS = (("linear 128x768->3072 +b", "gemm", ((128, 768), (3072, 768), (3072,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), BOTH),  # BERT-base's MLP up, 128 tokens, batch 1
            ("linear 128x3072->768 +b", "gemm", ((128, 3072), (768, 3072), (768,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), ("float32",)),  # its MLP down
            ("linear 128x768->768 +b", "gemm", ((128, 768), (768, 768), (768,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), ("float32",)),  # its attention projections
            ("linear 1x768->3072 +b", "gemm", ((1, 768), (3072, 768), (3072,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), BOTH),  # a decoded token
            ("bmm 12x128x64x128", "matmul", ((12, 128, 64), (12, 64, 128)), {}, lambda a, b: a @ b, BOTH),
            # ResNet's 3x3 convolutions at batch 1 as implicit GEMMs (ember.ops.conv_gemm: the weights (OC, C*9))
            ("conv3x3 64ch 56^2 +b", "conv2d_gemm", ((1, 64, 56, 56), (64, 576), (64,)),
             {"kernel": (3, 3), "padding": (1, 1, 1, 1)},
             lambda x, w, b: _functional().conv2d(x, w.view(64, 64, 3, 3), b, padding=1), FP16),
            ("conv3x3 256ch 14^2 +b", "conv2d_gemm", ((1, 256, 14, 14), (256, 2304), (256,)),
             {"kernel": (3, 3), "padding": (1, 1, 1, 1)},
             lambda x, w, b: _functional().conv2d(x, w.view(256, 256, 3, 3), b, padding=1), FP16))


def products(n: int, runs: int, rows: list) -> None:
    """The products of PRODUCTS in each of their types as the CUDA target schedules them, against
    torch (cuBLAS, cuDNN; TF32 off) on the same inputs; TFLOP/s of the products' 2 M N K."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        for dtype in dtypes:
            short = "fp16" if dtype == "float16" else "fp32"
            try:
                f, outs, build_s = operator_kernel(op, shapes, dtype, attrs)
                xs = [(torch.randn(shape, device="cuda") / shape[-1] ** 0.25).to(getattr(torch, dtype))
                      for shape in shapes]
                y = torch.empty(tuple(int(d) for d in outs[0].shape), device="cuda", dtype=getattr(torch, dtype))
                f(*xs, y)
                tolerance = 2e-2 if dtype == "float16" else 1e-4
                torch.testing.assert_close(y.float(), torch_fn(*xs).float(), rtol=tolerance, atol=tolerance)
                out, k = y.numel(), shapes[1][-1] if op == "conv2d_gemm" else shapes[0][-1]
                tflop = 2 * out * k / 1e12
                t = timed(lambda f=f, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} {short}", f"ember grid {f.grid} block {f.block}", t, tflop / t, build_s))
                t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
                rows.append((f"{name} {short}", f"torch {short}", t, tflop / t, None))
            except Exception:  # one product's failure must not hide the others'
                print(f"--- {name} {short} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)


# BERT-base's fp32 linear layers at 128 tokens on CUDA cores in other tiles than the default's (BM, BN, TM, TN):
# which one the default should take (ember.schedules.gpu.matmul.cuda_core_tiles) is for a GPU to say
FP32_TILES = ((32, 32, 2, 2), (32, 32, 4, 4), (64, 32, 4, 2), (64, 64, 4, 4), (32, 64, 2, 4))


def fp32_tiles(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows in each of FP32_TILES, against cuBLAS (TF32 off)."""
    import torch

    import ember
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.schedules.gpu.default import reductions_of
    from ember.schedules.gpu.matmul import cuda_cores
    from ember.target import Target

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        if "float32" not in dtypes or op != "gemm" or shapes[0][0] != 128:
            continue
        types = [TensorType(shape, "float32") for shape in shapes]
        bound, outs = infer_types(op, types, attrs)
        xs = [torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in shapes]
        y = torch.empty(tuple(int(d) for d in outs[0].shape), device="cuda")
        tflop = 2 * y.numel() * shapes[0][-1] / 1e12
        for BM, BN, TM, TN in FP32_TILES:
            try:
                t0 = time.perf_counter()
                s, args = node_kernel(op, types, bound, outs, schedule=False, target=Target("cuda"))
                out = args[-1]
                (C,) = [out] if out.op.reduce_axis else reductions_of(s, out)
                cuda_cores(s, C, out, {"BM": BM, "BN": BN, "BK": 16, "TM": TM, "TN": TN})
                f = ember.build(s, args, target="cuda")
                build_s = time.perf_counter() - t0
                f(*xs, y)
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                t = timed(lambda f=f, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} fp32", f"{BM}x{BN} tiles, {TM}x{TN} a thread", t, tflop / t, build_s))
            except Exception:  # one variant's failure must not hide the others'
                print(f"--- {name} fp32 in tiles {BM}x{BN} ({TM}x{TN}) failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
        rows.append((f"{name} fp32", "torch fp32", t, tflop / t, None))


def symbolic(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows built once with a symbolic number of tokens (a model
    compiled with `dynamic_shapes`), launched at 128 and 384 tokens, next to the kernel built for
    that size and cuBLAS (TF32 off); each checked against torch first."""
    import torch

    from ember.cuda.driver import device

    torch.backends.cuda.matmul.allow_tf32 = False
    device().activate()  # (`launch`, unlike a call, expects the context current)
    stream = torch.cuda.current_stream().cuda_stream
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        if "float32" not in dtypes or op != "gemm" or shapes[0][0] != 128:
            continue
        name = name.replace("128x", "")
        try:
            f, _, build_s = operator_kernel(op, [("tokens", shapes[0][1]), *shapes[1:]], "float32", attrs)
            for tokens in (128, 384):
                sized = [(tokens, shapes[0][1]), *shapes[1:]]
                xs = [torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in sized]
                y = torch.empty(tokens, shapes[1][0], device="cuda")
                pointers = [x.data_ptr() for x in (*xs, y)]
                f.launch(pointers, stream, [tokens])
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                tflop = 2 * y.numel() * shapes[0][-1] / 1e12
                t = timed(lambda f=f, pointers=pointers, tokens=tokens: f.launch(pointers, stream, [tokens]), runs)
                rows.append((f"{name} fp32, {tokens} tokens", f"ember symbolic grid {f.grid_of([tokens])}", t,
                             tflop / t, build_s))
                static, _, static_s = operator_kernel(op, sized, "float32", attrs)
                static(*xs, y)
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                t = timed(lambda f=static, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} fp32, {tokens} tokens", f"ember static grid {static.grid}", t, tflop / t,
                             static_s))
                t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
                rows.append((f"{name} fp32, {tokens} tokens", "torch fp32", t, tflop / t, None))
        except Exception:  # one layer's failure must not hide the others'
            print(f"--- {name} fp32 with symbolic tokens failed:")
            traceback.print_exc(limit=6, file=sys.stdout)


def split_k(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows whose grid leaves multiprocessors idle, compiled as a
    model of one layer for target "cuda" with split-K (ember.passes.split_k: partial sums, then
    their sum with the bias) and without (the one pass, fewer blocks), and cuBLAS (TF32 off); each
    checked against torch first. The models' calls replay CUDA graphs (from their second call)."""
    import torch

    import ember
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op
    from ember.schedules.gpu.split_k import splits_for

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        if "float32" not in dtypes or op != "gemm" or len(shapes[0]) != 2:
            continue  # (a batched product's operands are 3-D)
        (M, K), (N, _) = shapes[0], shapes[1]
        if M != 128 or (splits := splits_for(1, M, N, K)) == 1:
            continue
        x, w, b = (torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in shapes)
        g = Graph()
        (y,) = add_op(g, "gemm", [g.add_input("x", TensorType((M, K))), g.add_constant(w.cpu().numpy(), "w"),
                                  g.add_constant(b.cpu().numpy(), "b")], attrs)
        g.set_outputs([y])
        expected = torch_fn(x, w, b)
        tflop = 2 * M * N * K / 1e12
        for label, disabled in ((f"ember split-K, {splits} parts", ()), ("ember one pass", ("split_k",))):
            try:
                t0 = time.perf_counter()
                cm = ember.compile(g, target="cuda", disabled_passes=disabled)
                build_s = time.perf_counter() - t0
                torch.testing.assert_close(cm(x), expected, rtol=1e-4, atol=1e-4)
                t = timed(lambda cm=cm, x=x: cm(x), runs)
                kernels = ", ".join("+".join(sorted(k.ops)) for k in cm.kernels)
                rows.append((f"{name} fp32", f"{label}: {kernels}", t, tflop / t, build_s))
            except Exception:  # one variant's failure must not hide the others'
                print(f"--- {name} fp32 ({label}) failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda fn=torch_fn, xs=(x, w, b): fn(*xs), runs)
        rows.append((f"{name} fp32", "torch fp32", t, tflop / t, None))


# flash attention's cases: (name, batch, heads, tokens, head size, causal)
ATTENTION = (("BERT-base 1x12x128x64", 1, 12, 128, 64, False), ("8x16x2048x64", 8, 16, 2048, 64, False),
             ("causal 4x16x1024x64", 4, 16, 1024, 64, True))
# the candidates timed beside the default (fp16, static): the mma kernel's (warps, keys a tile,
# stages of k and v), each with its __launch_bounds__' blocks a multiprocessor (mma.min_blocks)
# and, where it has some, without (the kernel before), and the wmma kernel's keys a tile (its
# default at d=64: the kernel before that)
MMA_CONFIGS = ((4, 64, 2), (1, 64, 2), (2, 64, 2), (8, 64, 2), (4, 128, 2), (4, 64, 3))
WMMA_KEY_TILES = (32,)


def attention(n: int, runs: int, rows: list) -> None:
    """flash_attention on Tensor Cores (ember.ops.flash_attention_mma) in fp16 and bf16 at ATTENTION's
    sizes, against torch's scaled_dot_product_attention (its fused kernels) on the same inputs:
    the kernel as the CUDA target builds it (static), built once over a symbolic number of tokens
    (its grid per launch), reading q, k and v as heads of one packed (B, S, 3 H, D) projection and
    writing (B, S, H, D) (a transformer's layer in a model: its layout ops folded into the
    kernel), and in fp16 (static) at each of MMA_CONFIGS, and the wmma kernel (ember.ops.
    flash_attention_tc) at WMMA_KEY_TILES keys a tile; each checked against torch first (‖out -
    ref‖ / ‖ref‖ within 1e-2). Each is timed twice: a call, and per launch in a CUDA graph of 20
    (the GPU's time, without the ~20 us of Python a call costs at BERT's size). Each variant's
    speed is printed relative to torch's, then the best."""
    from ember.cuda.driver import device

    device().activate()  # (`launch`, unlike a call, expects the context current)
    for name, b, h, tokens, d, causal in ATTENTION:
        for dtype in ("float16", "bfloat16"):
            label = f"attention {name} {'fp16' if dtype == 'float16' else 'bf16'}"
            try:
                _attention_case(label, (b, h, tokens, d), dtype, causal, runs, rows)
            except Exception:  # one case's failure must not hide the others'
                print(f"--- {label} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)


def _attention_case(label: str, shape, dtype: str, causal: bool, runs: int, rows: list) -> None:
    import torch

    b, h, tokens, d = shape
    tflop = 4 * b * h * tokens * tokens * d / (2 if causal else 1) / 1e12
    xs = [torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) for _ in range(3)]
    y = torch.empty_like(xs[0])

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=causal)

    expected = sdpa().float()
    pointers = [x.data_ptr() for x in (*xs, y)]
    f, _, build_s = operator_kernel("flash_attention", [shape] * 3, dtype, {"causal": causal})
    variants = [(f"ember static grid {f.grid}, {f.registers} registers", lambda: f(*xs, y), build_s, y)]
    sym, _, sym_s = operator_kernel("flash_attention", [(b, h, "tokens", d)] * 3, dtype, {"causal": causal})
    variants.append(("ember symbolic tokens", lambda: sym.launch(pointers, torch.cuda.current_stream().cuda_stream,
                                                                 [tokens]), sym_s, y))
    packed = torch.cat([x.transpose(1, 2) for x in xs], 2).contiguous()  # (b, tokens, 3 h, d): q's heads, k's, v's
    rows_out = torch.empty(b, tokens, h, d, device="cuda", dtype=y.dtype)
    p, _, p_s = operator_kernel("flash_attention", [tuple(packed.shape)] * 3, dtype,
                                {"causal": causal, "layout": "bshd", "heads": (h, 0, h, 2 * h)})
    variants.append(("ember packed qkv in place, out (B, S, H, D)", lambda: p(packed, packed, packed, rows_out), p_s,
                     rows_out.transpose(1, 2)))
    if dtype == "float16":
        from ember.ops import flash_attention_mma as mma
        from ember.target import Target

        chosen = mma.warps_for(b * h, tokens, Target("cuda").gpu.multiprocessors)
        print(f"{label}: unfold_attention's warps a block on this GPU: {chosen}")
        for warps, bn, stages in MMA_CONFIGS:
            for bounded in (True, False) if mma.min_blocks(warps, d, d) else (True,):
                g, g_s = _mma_kernel(shape, dtype, causal, warps, bn, stages, bounded)
                bounds = f"launch bounds {mma.min_blocks(warps, d, d)} blocks" if bounded and mma.min_blocks(
                    warps, d, d) else "no launch bounds"
                variants.append((f"ember mma, {warps} warps, {bn} keys a tile, {stages} stages, {bounds}, "
                                 f"{g.registers} registers", lambda g=g: g(*xs, y), g_s, y))
        for bn in WMMA_KEY_TILES:
            g, g_s = _key_tile_kernel(shape, dtype, causal, bn)
            variants.append((f"ember wmma (scores through shared memory), {bn} keys a tile", lambda g=g: g(*xs, y),
                             g_s, y))
    t, t_graph = timed(sdpa, runs), graph_time(sdpa, runs)
    rows.append((label, "torch sdpa", t, tflop / t, None))
    if t_graph is not None:
        rows.append((f"{label} (graph)", "torch sdpa", t_graph, tflop / t_graph, None))
    reference = t_graph or t
    best = None
    for impl, call, seconds, out in variants:
        try:
            out.fill_(float("nan"))
            call()
            error = ((out.float() - expected).norm() / expected.norm()).item()
            assert error <= 1e-2, f"{impl}: ‖out - sdpa‖ / ‖sdpa‖ = {error:.2e}"
            t, t_graph = timed(call, runs), graph_time(call, runs)
        except Exception:  # one variant's failure must not hide the others'
            print(f"--- {label}, {impl} failed:")
            traceback.print_exc(limit=4, file=sys.stdout)
            continue
        rows.append((label, f"{impl}, error {error:.1e}", t, tflop / t, seconds))
        if t_graph is not None:
            rows.append((f"{label} (graph)", impl, t_graph, tflop / t_graph, seconds))
        print(f"{label}: {impl} {(t_graph or t) * 1e3:.3f} ms, {reference / (t_graph or t):.0%} of sdpa's speed",
              flush=True)
        best = min(best or (t_graph or t, impl), (t_graph or t, impl))
    if best is not None:
        print(f"{label}: best ember {best[1]} {best[0] * 1e3:.3f} ms, torch sdpa {reference * 1e3:.3f} ms: "
              f"{reference / best[0]:.0%} of torch's speed", flush=True)


def _key_tile_kernel(shape, dtype: str, causal: bool, bn: int):
    """flash_attention's wmma kernel with `bn` keys a tile (its shared memory bound set to that
    tile's), and the seconds it took to build."""
    from ember.ops import flash_attention_tc as tc

    d = shape[-1]
    return _attention_kernel(shape, dtype, lambda *heads, scale: tc.kernel(
        *heads[:3], None, heads[3], scale, causal, tc.shared_bytes(d, d, bn)))


def _mma_kernel(shape, dtype: str, causal: bool, warps: int, bn: int, stages: int, bounded: bool = True):
    """flash_attention's mma kernel with `warps` warps of 16 queries, `bn` keys a tile and k and v
    in `stages` stages (dynamic shared memory past 48 KiB), its launch bounds' blocks a
    multiprocessor where `bounded` (mma.min_blocks), and the seconds it took to build."""
    from ember.ops import flash_attention_mma as mma
    from ember.target import STATIC_SHARED

    d = shape[-1]
    dynamic = mma.shared_bytes(d, d, warps, bn, stages) > STATIC_SHARED
    return _attention_kernel(shape, dtype, lambda *heads, scale: mma.kernel(
        *heads[:3], None, heads[3], scale, causal, warps, bn, dynamic, stages,
        mma.min_blocks(warps, d, d) if bounded else None))


def _attention_kernel(shape, dtype: str, kernel_of):
    """A flash attention kernel of (B, H, S, D) operands, `kernel_of(q, k, v, out, scale=)` its
    statement on their HeadRows, and the seconds it took to build."""
    import math

    from benchmarks.cuda_timing import build
    from ember import te
    from ember.ops.gpu_loops import HeadRows

    def make():
        q, k, v = (te.placeholder(shape, dtype, name=x) for x in "qkv")
        (out,) = te.extern([(shape, dtype)], [q, k, v], lambda ins, outs: kernel_of(
            *map(HeadRows, ins), HeadRows(outs[0]), scale=1 / math.sqrt(shape[-1])), name="flash_attention")
        return te.create_schedule(out.op), [q, k, v, out]

    return build(make)
