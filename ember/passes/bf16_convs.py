"""The blocked convolutions in bf16 where the target's bf16 unit pays (`ember.compile(...,
precision="bf16")`, after the layout pass and the folding of its weight conversions):

    conv2d_nchwc(x, W, b?)  ->  conv2d_nchwc_bf16(x, pack(bf16(W)), b?)

the weights rounded to bf16 and packed in pairs of input channels once, at compile time
(ember.ops.conv_bf16), the activations staying fp32 in NCHW{b}c between kernels and rounded to
bf16 inside each convolution, the sums in fp32, the epilogues (bias, ReLU, a residual add) fused
as the fp32 convolution's are. The choice per layer, from the target and the layer's shape:

- the target has AVX512-BF16 (`vdpbf16ps`; a target with AMX has it too, and its convolutions
  run on AMX's tile where it fits, ember.schedules.cpu.conv_bf16). Without it the layer stays
  fp32: the same bf16 products on fp32 vectors would be slower than the fp32 convolution;
- groups 1: a depthwise convolution has one input channel per output channel, nothing for a
  pair of channels to sum, and stays fp32;
- output blocks of 16 channels (the unit's register; a convolution of 24 channels, in blocks of
  8, stays fp32) and a register tile of at least 2 output columns that divides the row
  (ember.intrinsics.conv_bf16.choose);
- an input already in blocks: a first layer's plain NCHW input (3 channels) would be gathered
  from its planes one value at a time into pixels of pairs, which costs what the products save
  or more (one Zen 5 core: ResNet-18's 7x7 layer 1.02 ms in bf16 against 1.04 in fp32,
  MobileNetV2's 3x3 0.44 against 0.19);
- at least MIN_PRODUCTS products per input value (OC * KH * KW / (SH * SW)): each call rounds
  its input to bf16 once, a pass over it that a convolution of few products per value does not
  earn back. One Zen 5 core, 1x1 convolutions: 32 to 16 channels at 112 x 112 (16 a value)
  137 us in bf16 against 98 in fp32; 192 to 32 at 28 x 28 (32) 67 against 72; 64 to 128 at
  56 x 56, stride 2 (32) 87 against 91; 384 to 64 at 14 x 14 (64) 52 against 65.

Per layer: benchmarks/conv_bf16.py --layers (every layer of ResNet-18's and MobileNetV2's shapes
this rule puts in bf16 runs faster there, the one it keeps fp32 slower); whole models: README.md.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..intrinsics import conv_bf16
from ..intrinsics.tiles import LANES
from ..ops.conv_bf16 import pack
from ..ops.layout import convert_layout
from ..target import Target
from ..tir import dtype as dt
from .rewrite import Rewriter, rebuild

MIN_PRODUCTS = 32  # per input value, for the bf16 convolution to pay for rounding its input (see above)


def bf16_convs(graph: Graph, target: Target | None = None) -> Graph:
    features = (target or Target()).features
    if conv_bf16.FEATURE not in features:
        return graph
    return rebuild(graph, _rewrite)


def _rewrite(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op != "conv2d_nchwc" or node.attrs["groups"] != 1 or node.attrs["in_channels"] is not None:
        return None
    x, w = inputs[:2]
    weights = rw.constant_data(w)
    if weights is None or weights.shape[5] != LANES or x.type.rank != 5 or not dt.is_float(x.type.dtype) \
            or min(node.attrs["padding"]) < 0:
        return None
    sh, sw = node.attrs["strides"]
    if weights.shape[0] * LANES * weights.shape[2] * weights.shape[3] < MIN_PRODUCTS * sh * sw:
        return None
    if conv_bf16.choose(node.outputs[0].type.shape[3], weights.shape[0]) is None:  # (OW in either layout)
        return None
    plain = convert_layout(weights, f"OIHW{weights.shape[4]}i{LANES}o", "OIHW")
    packed = rw.constant(pack(plain, x.type.shape[4]), f"{w.name}.bf16")
    attrs = {k: node.attrs[k] for k in ("strides", "padding", "dilations", "out_layout")}
    return rw.emit("conv2d_nchwc_bf16", [x, packed, *inputs[2:]], attrs, hint=node.name,
                   out_names=[node.outputs[0].name])
