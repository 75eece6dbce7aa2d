"""ResNet-50's 1x1 convolutions at the 28 x 28 of DeepLabV3's and FCN's output stride 8 (layer3's
1024 -> 256 and 256 -> 1024, layer4's 2048 -> 512 and 512 -> 2048): ember's blocked convolution
(conv2d_nchwc, bias) against ONNX Runtime's on the same layer (its NCHWc Conv node alone, by its
profiler) and the machine's fp32 FMA peak, one thread. Each time is the best of --runs runs (ember
by the thread's CPU time, ONNX Runtime's node by its 10th percentile) over --rounds rounds.

    python benchmarks/conv1x1_layers.py [--layers 2048x512x28 ...] [--rounds 3] [--runs 10]

Measured on the project's 2-core AMD EPYC (Zen 5 class, AVX-512), shared, one thread, FMA peak
288 GFLOP/s, microseconds (ember / ONNX Runtime's node), over three runs of differing load:
    1024 -> 256   1553-1700 / 1554-1627     256 -> 1024   1533-1580 / 1532-1627
    2048 -> 512   6389-7220 / 6309-6556     512 -> 2048   6250-6701 / 6289-6638
ember at 228-268 GFLOP/s (79-93% of the peak), level with ONNX Runtime but on 2048 -> 512, 1-10%
behind it, the more so the more other processes load the caches: each register tile (2 blocks x
7 columns) reads its 256 KiB of weights over all 2048 input channels, where ONNX Runtime's
pointwise kernel sums over batches of input channels (a weight panel in L1). Register tiles of
4 blocks x 7 columns or 2 x 14, and a parallel loop over the weights' block pairs outermost (a
pair's weights kept in L2 over the whole map) measured no faster (2048 -> 512: 194, 157 and 257
GFLOP/s against 213-257).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.conv1d_layers import cpu_time  # noqa: E402
from benchmarks.gemm_lowp import FP32_FMA, measure_peak  # noqa: E402
from ember.graph.core import TensorType  # noqa: E402
from ember.ops.layout import convert_layout  # noqa: E402
from ember.testing import build_op  # noqa: E402


def ember_run(x: np.ndarray, w: np.ndarray, bias: np.ndarray, block: int):
    """ember's conv2d_nchwc on x, w in blocks of `block`, checked against NumPy: a call."""
    xb, wb = convert_layout(x, "NCHW", f"NCHW{block}c"), convert_layout(w, "OIHW", f"OIHW{block}i{block}o")
    k = build_op("conv2d_nchwc", [TensorType(a.shape, "float32") for a in (xb, wb, bias)], {"padding": (0,) * 4})
    k.kernel.num_threads = 1
    out = np.empty(k.out_types[0].shape, np.float32)
    run = k.kernel.prepare(xb, wb, bias, out)
    run()
    want = np.einsum("oc,chw->ohw", w[:, :, 0, 0], x[0]) + bias[:, None, None]
    got = convert_layout(out, f"NCHW{block}c", "NCHW")[0]
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-5, f"relative error {err:.1e}"
    return run


def ort_node_us(x: np.ndarray, w: np.ndarray, bias: np.ndarray, runs: int) -> float:
    """The 10th percentile of ONNX Runtime's Conv node over `runs` runs, one thread (microseconds)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])], "conv1x1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[0], *x.shape[2:]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.enable_profiling = 1, 1, True
    sess = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                .SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(runs + 1):
        sess.run(None, {"x": x})
    times = [e["dur"] for e in json.loads(Path(sess.end_profiling()).read_text())
             if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and "Reorder" not in e["name"]]
    return float(np.percentile(times[1:], 10))


def main() -> None:
    from ember.target import Target

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", nargs="*", default=["1024x256x28", "256x1024x28", "2048x512x28", "512x2048x28"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    block, rng = Target().lanes("float32"), np.random.default_rng(0)
    peak = measure_peak(FP32_FMA, 1, cpu_time=True)
    print(f"fp32 FMA peak, one thread: {peak:.0f} GFLOP/s")
    for layer in args.layers:
        c, oc, size = (int(v) for v in layer.split("x"))
        x = rng.standard_normal((1, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((oc, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        bias = rng.standard_normal(oc).astype(np.float32)
        run, best_ember, best_ort = ember_run(x, w, bias, block), float("inf"), float("inf")
        for _ in range(args.rounds):
            best_ember = min(best_ember, cpu_time(run, args.runs) * 1e6)
            best_ort = min(best_ort, ort_node_us(x, w, bias, args.runs))
        flops = 2 * c * oc * size * size
        print(f"{c:4d} -> {oc:4d} {size}x{size}: ember {best_ember:7.0f} us ({flops / best_ember / 1e3:4.0f} GFLOP/s, "
              f"{100 * flops / best_ember / 1e3 / peak:3.0f}% of peak), ONNX Runtime's node {best_ort:7.0f} us "
              f"({flops / best_ort / 1e3:4.0f} GFLOP/s)", flush=True)


if __name__ == "__main__":
    main()
