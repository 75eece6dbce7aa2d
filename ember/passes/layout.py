"""Layout transformation: conv2d on the CPU in a blocked channel layout, NCHW[x]c (TVM's
AlterOpLayout; Liu et al., "Optimizing CNN Model Inference on CPUs", USENIX ATC 2019).

A convolution over NCHW{b}c reads whole vectors of b channels at every pixel and writes whole
vectors, its weights are packed once instead of at every call, and an epilogue over the same
layout (bias, activation, residual add) stays vectorized; the layout pays when tensors stay in it
from one convolution to the next. One walk in graph order:

- conv2d (2-d, groups 1, depthwise, or grouped with groups that fill whole blocks: see
  ember.ops.layout.grouped_blocks; its block-diagonal weights packed here, constant) becomes
  conv2d_nchwc (ember.ops.layout), b =
  channel_block(OC); its weights go through a layout_transform to OIHW{ib}i{b}o, which constant
  folding (the next pass in the pipeline) folds: the weights are transformed once, at compile
  time. A dense convolution reads its input in the blocked layout when there is one, else as it
  is (NCHW: a first layer of 3 channels); a depthwise one reads NCHW{b}c. It writes NCHW{b}c when
  its result reaches (through the operators below that follow the layout) another operator that
  takes a blocked input or where its multiply-adds reach MIN_BLOCKED_OUT (converted after), else
  NCHW directly (out_layout="NCHW": no conversion after a small last convolution before a
  flatten). A convolution stays conv2d when no block divides its channels,
  or when it is isolated: NCHW in and NCHW out (conv -> bias -> relu -> batch_norm stays as is);
- operators that do not care about the layout follow their inputs into it: the elementwise ones
  and the NumPy-broadcasting ones (BROADCASTING), their other operands brought into the same
  layout (a per-channel constant (C, 1, 1) is transformed, a per-pixel one (1, 1, H, W) only
  gets a unit block axis); batch_norm with constant statistics, as x * scale + shift with
  blocked scale and shift; max_pool2d and avg_pool2d (as max_pool2d_nchwc, avg_pool2d_nchwc:
  DenseNet's transitions, 1x1 convolution then a 2x2 average, stay blocked); mean/sum/max/min over H and W
  with keepdims, and global_avg_pool (as a mean over H and W); a concat along the channels
  where one input is blocked and the block divides the channels of each (DenseNet's blocks, an
  inception's branches: each convolution writes its slab of the concat blocked), and slices and
  concats along H and W (a convolution's regions, ember.passes.split_taps);
- everything else reads the plain layout: a layout_transform back to NCHW is inserted where a
  blocked value first meets such an operator (flatten, reshape, matmul, anything unknown) or is a
  graph output, once per value.

Each value of the input graph has one or more forms in the output graph, one per layout (a form
another operator asks for is made from an existing one, once). layout_transform nodes already in
the graph (blocking or unblocking, not transposing) make forms too, so a conversion followed by
its inverse cancels out (NCHW -> NCHW16c -> NCHW reads the NCHW value itself) and a chain of
conversions shortens to one.

Blocks: channel_block(C) is the SIMD width in fp32 lanes (ember.target) when it divides C, or
when C padded to whole blocks of it is at most a third larger; else half of it when that divides
C; else None. Padded channels (MobileNetV2's 24 in two 16-lane blocks, where 8-lane blocks took
three vectors for two: its 24-channel layers a third faster) hold zeros from a zero-padded
conversion into the layout, zero-padded weights and biases (folded at compile time); a dense
convolution over such an input sums over the real channels only (conv2d_nchwc's in_channels), so
that whatever an elementwise operator makes of the padding lanes (sigmoid(0) is not 0) never
reaches a real channel, and every other blocked operator is per channel. The padding is cropped
where the value leaves the layout (a `pad` by minus the padding, after the conversion to NCHW).

Measured at opt_level 3 (AVX-512, full size, batch 1, one thread, medians): ResNet-18 55.0 ms
against 74.7 ms with this pass disabled, MobileNetV2 12.9 ms against 21.7 ms.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.core import Graph, Node, TensorType, Value
from ..ops.binary import TABLE as ARITHMETIC
from ..ops.compare import COMPARISONS, LOGIC
from ..ops.layout import blocked, grouped_blocks, grouped_weights, parse_layout, primal_sizes
from ..ops.registry import get
from ..target import Target
from .rewrite import Rewriter

PLAIN = "NCHW"
BROADCASTING = frozenset([name for name, *_ in ARITHMETIC + COMPARISONS + LOGIC] + ["where"])
SPATIAL_REDUCTIONS = ("mean", "sum", "max", "min")
WINDOW_ATTRS = ("strides", "padding", "dilations", "groups")  # what conv2d_nchwc takes of a conv2d's attributes
# multiply-adds from which a convolution whose result goes on in NCHW writes it blocked all the same,
# converted after: its register tile then writes vectors along the columns, where written as NCHW
# it writes a block's channels element by element (one thread of an AMD EPYC Zen 5, blocked +
# conversion against NCHW written: 64 -> 64 3x3 over 14 x 14 59 against 67 us, 256 -> 1024 1x1
# over 28 x 28 1.92 against 2.11 ms, 2048 -> 512 3x3 over 28 x 28 75.8 against 87.0 ms; 16 -> 32
# 3x3 over 8 x 8 5 against 4 us), and a 3x3 one can become Winograd's (ember.passes.winograd)
MIN_BLOCKED_OUT = 1 << 22


def layout(graph: Graph, target: Target | None = None) -> Graph:
    """The graph with convolutions in blocked layouts of the target's SIMD width (default: C on
    this machine)."""
    return _Layouts(graph, (target or Target()).lanes("float32")).run()


def channel_block(channels: int, lanes: int) -> int | None:
    """The channels of one block for a tensor of `channels` channels (see the module doc)."""
    if channels % lanes and 3 * padded(channels, lanes) <= 4 * channels:
        return lanes
    return next((b for b in (lanes, lanes // 2) if b > 1 and channels % b == 0), None)


def padded(channels: int, block: int) -> int:
    """`channels` rounded up to whole blocks."""
    return -(-channels // block) * block


def padded_groups(channels: int, out_channels: int, groups: int, block: int) -> int | None:
    """The groups of a grouped convolution over channels padded to whole blocks, the padding on
    both sides as many more groups of zero weights (RegNet's 104 and 440 channels in groups of 8,
    in 16-lane blocks: one more group each), when grouped_blocks takes them; else None. Each real
    output channel then reads its own group only, never a padding lane."""
    extra, rest = divmod(padded(channels, block) - channels, channels // groups)
    if rest or padded(out_channels, block) - out_channels != extra * (out_channels // groups):
        return None
    total = groups + extra
    return total if grouped_blocks(channels + extra * (channels // groups),
                                   out_channels + extra * (out_channels // groups), total, block) else None


class _Layouts:
    def __init__(self, graph: Graph, lanes: int):
        self.old, self.lanes = graph, lanes
        self.rw = Rewriter(graph)
        self.root: dict[Value, Value] = {}  # an old layout_transform's output -> the value it transforms
        self.own_layout: dict[Value, str] = {}  # the layout an old value has in the old graph, if not NCHW
        self.forms: dict[Value, dict[str, Value]] = {}  # root -> layout -> its new value in that layout
        self.leads = self._leading_to_blocked()

    def run(self) -> Graph:
        for node in self.old.nodes:
            if len(node.outputs) != 1 or not self._rewrite(node):
                self.rw.copy(node, [self.as_is(v) for v in node.inputs])
        for v in self.old.outputs:
            out = self.as_is(v)
            if out.name != v.name:  # (the graph's outputs keep their names)
                out, = self.rw.emit("identity", [out], out_names=[v.name])
            self.rw.alias(v, out)
        return self.rw.finish()

    # -- forms ----------------------------------------------------------------------------------
    def as_is(self, v: Value) -> Value:
        """The new value of old `v`, in the layout it has in the old graph."""
        root = self.root.get(v, v)
        if root not in self.forms:
            return self.rw.value(v)
        return self.form(root, self.own_layout.get(v, PLAIN))

    def form(self, v: Value, layout: str) -> Value:
        """The new value of old root `v` in `layout`: an existing form, or one made from one."""
        own = self.own_layout.get(v, PLAIN)
        forms = self._forms_of(v)
        if layout not in forms:
            src, value = next(iter(forms.items()))
            name = v.name if layout == own else f"{v.name}_{layout.lower()}"
            forms[layout] = self._convert(value, src, layout, name, self._channels(v))
        return forms[layout]

    def _convert(self, value: Value, src: str, dst: str, name: str, channels: int | None) -> Value:
        """New `value` from layout `src` to `dst`, where a blocked NCHW layout whose block does
        not divide the `channels` (None: not NCHW) holds them padded to whole blocks: cropped
        when leaving it, padded with zeros when entering it, through NCHW."""
        block = parse_layout(dst).block("C") or 1
        if channels is None or (primal_sizes("layout", parse_layout(src), value.shape)["C"] == channels
                                and channels % block == 0):
            return self.rw.emit("layout_transform", [value], {"src": src, "dst": dst}, hint="layout_transform",
                                out_names=[name])[0]
        if src != PLAIN:
            value, = self.rw.emit("layout_transform", [value], {"src": src, "dst": PLAIN}, hint="layout_transform")
        target = padded(channels, block)
        if target != value.shape[1]:
            value, = self.rw.emit("pad", [value], {"pads": (0, 0, 0, 0, 0, target - value.shape[1], 0, 0)},
                                  hint="pad_channels", **({"out_names": [name]} if dst == PLAIN else {}))
        if dst == PLAIN:
            return value
        return self.rw.emit("layout_transform", [value], {"src": PLAIN, "dst": dst}, hint="layout_transform",
                            out_names=[name])[0]

    def _channels(self, v: Value) -> int | None:
        """The channels of old root `v` when it is an NCHW tensor (in some blocked form or not)."""
        layout = parse_layout(self.own_layout.get(v, PLAIN))
        if layout.primal != PLAIN or len(layout.axes) != v.type.rank or not TensorType(v.shape[1:]).is_static:
            return None
        return primal_sizes("layout", layout, v.shape)["C"]

    def _forms_of(self, root: Value) -> dict[str, Value]:
        if root not in self.forms:
            self.forms[root] = {self.own_layout.get(root, PLAIN): self.rw.value(root)}
        return self.forms[root]

    def blocked_form(self, v: Value) -> tuple[int, Value] | None:
        """(block, value) of an existing NCHW{b}c form of old NCHW `v`, if any."""
        if not self._nchw(v):
            return None
        for layout, value in self.forms.get(self.root.get(v, v), {}).items():
            parsed = parse_layout(layout)
            if parsed.primal == PLAIN and len(parsed.axes) == 5 and parsed.block("C"):
                return parsed.block("C"), value
        return None

    def _nchw(self, v: Value) -> bool:
        return v.type.rank == 4 and self.own_layout.get(v, PLAIN) == PLAIN

    def _emit(self, op: str, inputs: list[Value], attrs, node: Node, layout: str) -> bool:
        """The blocked form (in `layout`) of node's output: `op` on `inputs`."""
        out = node.outputs[0]
        self.forms[out] = {layout: self.rw.emit(op, inputs, attrs, hint=node.name,
                                                out_names=[f"{out.name}_{layout.lower()}"])[0]}
        return True

    # -- which convolutions to block ----------------------------------------------------------------
    def _leading_to_blocked(self) -> set[Value]:
        """The values from which a path of layout-agnostic operators reaches an operator that
        takes a blocked input (a convolution to block, a pooling, a spatial mean)."""
        users = self.old.users()
        leads: set[Value] = set()
        for node in reversed(self.old.nodes):
            for v in node.outputs:
                if any(self._takes_blocked(u) or (self._follows(u) and u.outputs[0] in leads)
                       for u in users.get(v, [])):
                    leads.add(v)
        return leads

    def _takes_blocked(self, node: Node) -> bool:
        return (node.op == "conv2d" and self._conv_block(node) is not None) or node.op in (
            "max_pool2d", "avg_pool2d", "global_avg_pool", *SPATIAL_REDUCTIONS)

    def _agnostic(self, node: Node) -> bool:
        return len(node.outputs) == 1 and (node.op in BROADCASTING or node.op == "batch_norm"
                                           or get(node.op).pattern == "elementwise")

    def _follows(self, node: Node) -> bool:
        """An operator that takes the layout of its inputs."""
        return self._agnostic(node) or self._concat_axis(node) is not None or self._spatial_slice(node) is not None

    @staticmethod
    def _concat_axis(node: Node) -> int | None:
        """The axis of a concat of NCHW tensors along C, H or W (DenseNet's blocks, an inception's
        branches; a convolution's regions, ember.passes.split_taps), else None."""
        if node.op != "concat" or node.outputs[0].type.rank != 4 or node.attrs["axis"] % 4 == 0:
            return None
        return node.attrs["axis"] % 4

    @staticmethod
    def _spatial_slice(node: Node) -> dict | None:
        """The attributes of a slice of an NCHW tensor along H and W alone, in steps of 1, with
        its axes counted from the front (as they are in NCHW{b}c), else None."""
        if node.op != "slice" or node.inputs[0].type.rank != 4 or any(s != 1 for s in node.attrs["steps"] or ()):
            return None
        axes = [a % 4 for a in (node.attrs["axes"] or range(len(node.attrs["starts"])))]
        return {**node.attrs, "axes": axes} if set(axes) <= {2, 3} else None

    def _conv_block(self, node: Node) -> int | None:
        """The output block of a conv2d that conv2d_nchwc can run, else None."""
        x, w = node.inputs[:2]
        if not self._nchw(x) or self.own_layout.get(w, "OIHW") != "OIHW" or not TensorType(x.shape[1:]).is_static \
                or node.attrs.get("w_block"):  # (weights packed already: ember.passes.pack_weights)
            return None
        groups, block = node.attrs["groups"], channel_block(w.shape[0], self.lanes)
        if groups == 1 or groups == x.shape[1] == w.shape[0] and w.shape[1] == 1:
            return block
        # grouped: constant weights, and blocks of both sides that whole groups fill (ResNeXt, RegNet)
        if block is None or self.rw.constant_data(self.as_is(w)) is None or \
                channel_block(x.shape[1], self.lanes) != block or \
                padded_groups(x.shape[1], w.shape[0], groups, block) is None:
            return None
        return block

    # -- rules ----------------------------------------------------------------------------------
    def _rewrite(self, node: Node) -> bool:
        """Rewrite `node` if a rule applies (True), else leave it to be copied."""
        match node.op:
            case "layout_transform":
                return self._transform(node)
            case "conv2d":
                return self._conv(node)
            case "batch_norm":
                return self._batch_norm(node)
            case "max_pool2d" | "avg_pool2d":
                found = self.blocked_form(node.inputs[0])
                return found is not None and self._emit(f"{node.op}_nchwc", [found[1]], node.attrs, node,
                                                        blocked(PLAIN, "C", found[0]))
            case "global_avg_pool" | "mean" | "sum" | "max" | "min":
                return self._spatial_reduction(node)
            case "concat":
                return self._concat(node)
            case "slice":
                found, attrs = self.blocked_form(node.inputs[0]), self._spatial_slice(node)
                return found is not None and attrs is not None and self._emit(
                    "slice", [found[1]], attrs, node, blocked(PLAIN, "C", found[0]))
        return self._agnostic(node) and self._elementwise(node)

    def _transform(self, node: Node) -> bool:
        """A conversion already in the graph (blocking or unblocking only, no transposition): its
        output is another form of its input."""
        (x,), (out,) = node.inputs, node.outputs
        src, dst = node.attrs["src"], node.attrs["dst"]
        if parse_layout(src).primal != parse_layout(dst).primal or self.own_layout.get(x, PLAIN) not in (src, PLAIN):
            return False
        root = self.root.get(x, x)
        if self.own_layout.get(x, PLAIN) != src:
            if root in self.forms:  # (x is in use as NCHW already)
                return False
            self.own_layout[x] = src
        self._forms_of(root)
        self.root[out], self.own_layout[out] = root, dst
        return True

    def _conv(self, node: Node) -> bool:
        (x, w), (out,) = node.inputs[:2], node.outputs
        ob = self._conv_block(node)
        found = self.blocked_form(x)
        if ob is None or (found is None and out not in self.leads):
            return False
        groups, attrs = node.attrs["groups"], {k: node.attrs[k] for k in WINDOW_ATTRS}
        if groups != 1 and w.shape[1] != 1:  # grouped: x in the output's blocks, whole ones (grouped_blocks)
            xin = self.form(self.root.get(x, x), blocked(PLAIN, "C", ob))
            attrs["groups"] = padded_groups(x.shape[1], w.shape[0], groups, ob)
            extra = (attrs["groups"] - groups) * (w.shape[0] // groups)  # the padding's groups' output channels
            data = np.pad(self.rw.constant_data(self.as_is(w)), ((0, extra), (0, 0), (0, 0), (0, 0)))
            weights = self.rw.constant(grouped_weights(data, attrs["groups"], ob),
                                       f"{w.name}_grouped{ob}")  # block-diagonal, packed here
            bias = [self.as_is(v) for v in node.inputs[2:]]
            if extra and bias:
                bias = self.rw.emit("pad", bias, {"pads": (0, extra)}, hint="pad_channels")
            return self._conv_out(node, [xin, weights, *bias], attrs, ob, extra)
        depthwise = groups != 1
        if depthwise:
            ib, xin = ob, self.form(self.root.get(x, x), blocked(PLAIN, "C", ob))
        else:
            ib, xin = found if found is not None else (1, self.as_is(x))
        # channels padded to whole blocks: zero weights and biases make zero lanes, and a dense
        # convolution sums over the input's real channels only (in_channels)
        oc, ic = w.shape[0], x.shape[1]
        held = xin.shape[1] * ib if xin.type.rank == 5 else ic
        if depthwise:
            attrs["groups"] = held
        elif held != ic:
            attrs["in_channels"] = ic
        self.own_layout.setdefault(w, "OIHW")
        w_layout = f"OIHW{1 if depthwise else ib}i{ob}o"
        grow = (padded(oc, ob) - oc, 0 if depthwise else held - ic)
        if any(grow):
            wp, = self.rw.emit("pad", [self.as_is(w)], {"pads": (0,) * 4 + grow + (0, 0)}, hint="pad_channels")
            wp, = self.rw.emit("layout_transform", [wp], {"src": "OIHW", "dst": w_layout}, hint="layout_transform")
        else:
            wp = self.form(self.root.get(w, w), w_layout)
        bias = [self.as_is(v) for v in node.inputs[2:]]
        if grow[0] and bias:
            bias = self.rw.emit("pad", bias, {"pads": (0, grow[0])}, hint="pad_channels")
        ins = [xin, wp, *bias]
        return self._conv_out(node, ins, attrs, ob, grow[0])

    def _conv_out(self, node: Node, ins: list[Value], attrs: dict, ob: int, crop: int) -> bool:
        """conv2d_nchwc on `ins`: blocked where its result leads to a blocked input, else NCHW
        (its last `crop` channels, padding, cut off)."""
        out = node.outputs[0]
        if out in self.leads or _multiply_adds(node) >= MIN_BLOCKED_OUT:
            return self._emit("conv2d_nchwc", ins, attrs, node, blocked(PLAIN, "C", ob))
        # the result goes on in NCHW only: a small convolution writes it so, with no conversion after
        attrs["out_layout"] = "NCHW"
        new, = self.rw.emit("conv2d_nchwc", ins, attrs, hint=node.name, out_names=[] if crop else [out.name])
        if crop:
            new, = self.rw.emit("pad", [new], {"pads": (0, 0, 0, 0, 0, -crop, 0, 0)}, hint="pad_channels",
                                out_names=[out.name])
        self.rw.alias(out, new)
        return True

    def _elementwise(self, node: Node) -> bool:
        out = node.outputs[0]
        found = [f for f in map(self.blocked_form, node.inputs) if f is not None]
        if not found or out.type.rank != 4:
            return False
        shapes = [(1,) * (4 - v.type.rank) + tuple(v.shape) for v in node.inputs]
        for v, shape in zip(node.inputs, shapes):
            if v.type.rank > 4 or shape[1] not in (1, out.shape[1]) or (shape[1] == 1 and not v.type.is_static):
                return False
            if v.type.rank == 4 and shape[1] != 1 and not self._nchw(v):
                return False
        layout = blocked(PLAIN, "C", found[0][0])
        ins = [self.form(self.root.get(v, v), layout) if v.type.rank == 4 and shape[1] != 1
               else self._broadcast(self.as_is(v), shape, layout) for v, shape in zip(node.inputs, shapes)]
        return self._emit(node.op, ins, node.attrs, node, layout)

    def _broadcast(self, value: Value, shape: tuple, layout: str) -> Value:
        """New `value`, broadcast as NCHW `shape` against a tensor in blocked `layout`, in that
        layout: a unit block axis when it has one channel, else reshaped to 4-d and blocked."""
        name = f"{value.name}_{layout.lower()}"
        if shape[1] == 1:
            return self.rw.emit("reshape", [value], {"shape": shape + (1,)}, hint="reshape", out_names=[name])[0]
        if value.type.rank != 4:
            value, = self.rw.emit("reshape", [value], {"shape": shape}, hint="reshape", out_names=[f"{value.name}_4d"])
        return self._convert(value, PLAIN, layout, name, shape[1])

    def _batch_norm(self, node: Node) -> bool:
        """Inference batch_norm with constant statistics: x * scale + shift, with scale and shift
        per channel in the layout of x."""
        (x, *params), (out,) = node.inputs, node.outputs
        data = [self.rw.constant_data(self.as_is(v)) for v in params]
        found = self.blocked_form(x)
        if found is None or any(d is None for d in data):
            return False
        block, xin = found
        mean, var, weight, bias = (d.astype(np.float64) for d in data)
        scale = weight / np.sqrt(var + node.attrs["eps"])
        layout, shape = blocked(PLAIN, "C", block), (1, x.shape[1], 1, 1)
        scale, shift = (self._broadcast(self.rw.constant(c.reshape(shape).astype(x.dtype), f"{node.name}_{what}"),
                                        shape, layout)
                        for c, what in ((scale, "scale"), (bias - mean * scale, "shift")))
        y, = self.rw.emit("mul", [xin, scale], hint=node.name, out_names=[f"{out.name}_scaled"])
        return self._emit("add", [y, shift], {}, node, layout)

    def _concat(self, node: Node) -> bool:
        """A concat one of whose inputs is blocked: the same over the inputs in its layout, along H
        or W, or along C where that block divides the channels of each (whole blocks, no padding
        between)."""
        axis, found = self._concat_axis(node), next(filter(None, map(self.blocked_form, node.inputs)), None)
        if axis is None or found is None or not all(self._nchw(v) and (
                axis != 1 or isinstance(v.shape[1], int) and v.shape[1] % found[0] == 0) for v in node.inputs):
            return False
        layout = blocked(PLAIN, "C", found[0])
        return self._emit("concat", [self.form(self.root.get(v, v), layout) for v in node.inputs], {"axis": axis},
                          node, layout)

    def _spatial_reduction(self, node: Node) -> bool:
        """A reduction over H and W (kept), or global_avg_pool: the same over the blocked form."""
        found = self.blocked_form(node.inputs[0])
        if found is None:
            return False
        if node.op == "global_avg_pool":
            op, attrs = "mean", {"axes": (2, 3), "keepdims": True}
        else:
            axes = node.attrs["axes"]
            axes = (axes,) if isinstance(axes, int) else axes
            if axes is None or not node.attrs["keepdims"] or {a % 4 for a in axes} - {2, 3}:
                return False
            op, attrs = node.op, {**node.attrs, "axes": tuple(sorted({a % 4 for a in axes}))}
        return self._emit(op, [found[1]], attrs, node, blocked(PLAIN, "C", found[0]))


def _multiply_adds(node: Node) -> int:
    """A convolution's multiply-adds (0 where a size is symbolic)."""
    out, w = node.outputs[0].shape, node.inputs[1].shape
    sizes = (*out, *w[1:])
    return math.prod(sizes) if all(isinstance(d, int) for d in sizes) else 0
