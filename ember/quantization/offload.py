"""The int8 products of a quantized graph offloaded to an int8 accelerator (`ember.quantize(...,
offload=vta)`), as TVM's VTA flow partitions a model: each qgemm with static rows and constant
weights runs its int32 product on the device (its simulator) and its epilogue (bias, scale,
requantization) on the host in NumPy (ember.ops.quantized.epilogue: the kernel's own roundings);
everything else stays on the CPU as compiled kernels. The compiler cuts the graph around those
nodes (ember.compile_graph's `host`, the machinery of data-dependent operators), so the model is
a SegmentedModel with one host step per product: no new runtime. The sums are exact in int32 on
both, so the result is bit-exact against the CPU int8 path. (The epilogue is not left to a fused
CPU kernel: there the float32 rescale would fuse with the bias add after it into one
contracted multiply-add, which qgemm's kernel, storing its product first, does not do.)

The device's core is signed (int8 x int8), qgemm's activations uint8: the host feeds a - 128 and
adds 128 * sum_k w per column back (sum_k a w = sum_k (a - 128) w + 128 sum_k w, exact in
int32); rows and K are padded with zeros to the core's multiples (qgemm's N already is one). The
weights are laid out for the device once, at compile time; each GEMM shape builds one device
kernel (ember.accel.schedules.gemm, one core tile single buffered unless `tiles` gives a
schedule for its shape, as ember.accel.tune.tune_gemm finds one; equal shapes share the built
library). `device_reports(model)` gives the simulator's report of
each product's last call.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..accel.schedules import Tiles, gemm, intrinsic_shape
from ..accel.spec import Accelerator
from ..errors import ArgumentTypeError
from ..graph.core import Graph, Node
from ..kernel import build
from ..ops.quantized import epilogue, unpack

ZERO = 128  # uint8 activations as the core's int8: a - ZERO


class DeviceProduct:
    """`run(a, packed, bias[, scale]) -> [qgemm's output]`, its product on the device (see the
    module doc); the node's packed weights are passed but not read: the device's copy is laid out
    at compile time."""

    def __init__(self, accel: Accelerator, node: Node, weights: np.ndarray,
                 schedule: tuple[Tiles, str] = (None, "single")):
        k, n = weights.shape
        self.attrs = node.attrs
        self.m, self.k = node.inputs[0].type.shape[0], k
        self.mp, _, self.kp = padded(accel, self.m, n, k)
        self.weights = np.zeros((n, self.kp), np.int8)  # VTA's weight rows: (N, K)
        self.weights[:, :k] = weights.T
        self.fold = ZERO * weights.astype(np.int32).sum(0, dtype=np.int32)
        s, args = gemm(accel, self.mp, n, self.kp, *schedule)
        self.kernel = build(s, args, target=accel, name=f"qgemm_{self.mp}x{n}x{self.kp}")

    def __call__(self, a: np.ndarray, _packed: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
        rows = np.zeros((self.mp, self.kp), np.int8)
        rows[:self.m, :self.k] = (a.astype(np.int16) - ZERO).astype(np.int8)
        acc = np.empty((self.mp, self.weights.shape[0]), np.int32)
        self.kernel(rows, self.weights, acc)
        return [epilogue(acc[:self.m] + self.fold, rest, self.attrs)]

    def report(self):
        """The simulator's report of the last call (ember.accel.report.Report)."""
        return self.kernel.report()


def padded(accel: Accelerator, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(m, n, k) of the GEMM the device runs for an m x n x k product: m and k padded to the core's
    multiples (n is qgemm's, a multiple of 16 already)."""
    im, _, ik = intrinsic_shape(accel)
    return -(-m // im) * im, n, -(-k // ik) * ik


def check_accelerator(accel) -> None:
    """ArgumentTypeError unless `accel` is an accelerator with an int8 core into int32."""
    core = getattr(accel, "core", None)
    if core is None or (core.inp_dtype, core.wgt_dtype, core.acc_dtype, core.inp_layout) != (
            "int8", "int8", "int32", "ik"):
        what = f"{accel.name} ({core.inp_dtype} into {core.acc_dtype})" if core is not None else repr(accel)
        raise ArgumentTypeError(f"ember.quantize: offload needs an int8 accelerator with int32 accumulators "
                                f"(ember.accel.vta), got {what}")


def offload(graph: Graph, accel: Accelerator,
            tiles: Mapping[tuple[int, int, int], tuple[Tiles, str]] | None = None) -> dict[str, DeviceProduct]:
    """The host function of each qgemm of the graph the device takes (static rows, constant
    weights), by node name: compile_graph's `host`. tiles: (m, n, k) of a padded GEMM (`padded`)
    -> its (tiles, buffering) (default: one core tile, single buffered; the best Trial of
    ember.accel.tune.tune_gemm gives better)."""
    check_accelerator(accel)
    host = {}
    for node in graph.nodes:
        if node.op != "qgemm" or not isinstance(node.inputs[0].type.shape[0], int) \
                or not graph.is_constant(node.inputs[1]):
            continue
        weights = unpack(graph.constants[node.inputs[1].name])
        shape = padded(accel, node.inputs[0].type.shape[0], weights.shape[1], weights.shape[0])
        host[node.name] = DeviceProduct(accel, node, weights, *([tiles[shape]] if tiles and shape in tiles else []))
    return host


def device_reports(model) -> dict[str, object]:
    """The simulator's report (ember.accel.report.Report) of each offloaded product's last call,
    by its step (a SegmentedModel's `what`), in the order the model runs them."""
    return {s.what: s.run.report() for s in getattr(model, "steps", ()) if isinstance(s.run, DeviceProduct)}
