"""The convolutions of a model for the GPU as implicit GEMMs: on Tensor Cores in half precision
(`ember.compile(..., precision="fp16" | "bf16", target="cuda")`, after half_precision), on CUDA
cores in float32 (precision "fp32": ember.cuda.schedules.cuda_core_product, where the direct
convolution summed all of C*KH*KW in one thread per output, 4608 terms in ResNet-18's last
layers):

    conv2d(x, W, b?)  ->  conv2d_gemm(x, W', b?)

W' the weights reshaped once at compile time to (OC, C*KH*KW) (ember.ops.conv_gemm); the
epilogue after it (a ReLU, a residual) fuses into the product's kernel as after a conv2d. Only
2-D convolutions of one group with constant weights of float16, bfloat16 or float32 are
rewritten: a depthwise or grouped one stays a conv2d, an output a thread (its products per
output are too few for a product's tiles). A "tf32" model's are rewritten after tf32_products
rounded their operands: fp32 sums of tf32 operands on CUDA cores, as conv2d gave.
"""

from __future__ import annotations

from ..graph.core import Graph
from .rewrite import Rewriter

HALF = ("float16", "bfloat16")  # the operands of Tensor Cores' products


def conv_gemm(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op != "conv2d" or node.attrs["groups"] != 1 or not node.outputs[0].type.is_static or (
                node.inputs[0].type.dtype not in (*HALF, "float32") or not graph.is_constant(node.inputs[1])):
            rw.copy(node, rw.inputs(node))
            continue
        x, w = node.inputs[:2]
        weights = graph.constants[w.name]
        oc, c, kh, kw = weights.shape
        flat = rw.constant(weights.reshape(oc, c * kh * kw), f"{w.name}.gemm")
        attrs = {"kernel": (kh, kw), "strides": tuple(node.attrs["strides"]), "padding": tuple(node.attrs["padding"]),
                 "dilations": tuple(node.attrs["dilations"])}
        (out,) = rw.emit("conv2d_gemm", [rw.value(x), flat, *rw.inputs(node)[2:]], attrs, hint=node.name,
                         out_names=[node.outputs[0].name])
        rw.alias(node.outputs[0], out)
    return rw.finish()
