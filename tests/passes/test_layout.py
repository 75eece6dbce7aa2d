"""The layout pass (ember/passes/layout.py) on small conv graphs: convolutions in NCHW{b}c with
their weights folded into blocked constants by the pipeline, the layout carried through
elementwise operators, bias and batch-norm constants, residual adds and pooling (max and average), conversions
only at the boundaries (reshape, graph outputs, operators that need NCHW), adjacent conversions
cancelled, isolated or unblockable convolutions left alone; every result compared with the
unoptimized graph (NumPy references and compiled kernels) at rtol = atol = 1e-4."""

import numpy as np
import pytest
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.layout import channel_block, layout
from ember.passes.pipeline import PIPELINES, run_pipeline
from ember.target import Target
from ember.testing import random_array

TOL = {"rtol": 1e-4, "atol": 1e-4}
LANES = Target().lanes("float32")
LEVEL = next(level for level, passes in sorted(PIPELINES.items()) if "layout" in passes)


def blocked(channels: int) -> str:
    return f"NCHW{channel_block(channels, LANES)}c"


def conv(g, x, out_channels, k=3, groups=1, bias=True, **attrs):
    w = g.add_constant(random_array((out_channels, x.shape[1] // groups, k, k)), "w")
    ins = [x, w] + ([g.add_constant(random_array((out_channels,)), "b")] if bias else [])
    return add_op(g, "conv2d", ins, {"padding": (k // 2,) * 4, "groups": groups, **attrs})[0]


def op(g, name, *inputs, **attrs):
    return add_op(g, name, list(inputs), attrs)[0]


def conversions(g: Graph) -> list:
    """The layout_transform nodes of activations (not of constant weights)."""
    return [n for n in g.nodes if n.op == "layout_transform" and not g.is_constant(n.inputs[0])]


def compiled_same(g: Graph, **options):
    """The graph compiled with `options` computes what it computes unoptimized."""
    inputs = [random_array(v.shape, v.dtype) for v in g.inputs]
    cm = ember.compile(g, **options)
    got, want = cm(*inputs), ember.compile(g, opt_level=0)(*inputs)
    for k, (a, b) in enumerate(zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want)), strict=True)):
        np.testing.assert_allclose(a, b, **TOL, err_msg=f"output {k}")
    return cm


def small_cnn() -> Graph:
    """A first layer on 3 channels, bias and relu, a max pool, a conv with a per-channel bias
    constant, a depthwise conv with clip, a residual add, a global mean, then a linear head."""
    g = Graph("cnn")
    x = g.add_input("x", TensorType((1, 3, 16, 16)))
    y = op(g, "relu", conv(g, x, 16, k=7, strides=(2, 2)))
    y = op(g, "max_pool2d", y, kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    z = op(g, "add", conv(g, y, 32, bias=False), g.add_constant(random_array((32, 1, 1)), "bias"))
    z = op(g, "relu", z)
    d = op(g, "clip", conv(g, z, 32, groups=32, bias=False), min=0.0, max=6.0)
    z = op(g, "add", d, z)
    z = op(g, "mean", z, axes=(-1, -2), keepdims=True)
    z = op(g, "reshape", z, shape=(1, 32))
    g.set_outputs([op(g, "gemm", z, g.add_constant(random_array((32, 10)), "fc"))])
    return g


def test_the_pipeline_runs_the_convolutions_blocked_with_folded_weights():
    g = small_cnn()
    out = run_pipeline(g, LEVEL, disabled_passes=["winograd"])  # (its 3x3 conv on 4 x 4 would be one)
    convs = [n for n in out.nodes if n.op == "conv2d_nchwc"]
    assert len(convs) == 3 and "conv2d" not in ops(out)
    assert convs[0].inputs[0].name == "x"  # the first layer reads its 3 channels as they come
    for n in convs:  # weights transformed once, at compile time: blocked constants
        assert out.is_constant(n.inputs[1]) and n.inputs[1].type.rank == 6
    depthwise = convs[2]
    assert depthwise.attrs["groups"] == 32 and depthwise.inputs[1].shape[1] == depthwise.inputs[1].shape[4] == 1
    assert not any(out.is_constant(n.inputs[0]) for n in out.nodes if n.op in ("layout_transform", "reshape"))
    assert all(v.type.rank == 5 for n in out.nodes if n.op in ("relu", "clip", "add", "mean", "max_pool2d_nchwc")
               for v in n.outputs)
    assert "max_pool2d_nchwc" in ops(out)
    # one conversion, back to NCHW before the reshape, of the (1, 32, 1, 1) mean
    (conversion,) = [n for n in out.nodes if n.op == "layout_transform"]
    assert conversion.attrs["src"] == blocked(32) and conversion.outputs[0].shape == (1, 32, 1, 1)
    check_same(g, out, **TOL)
    cm = compiled_same(g, opt_level=LEVEL, disabled_passes=["winograd"])
    assert "conv2d_nchwc" in cm.kernels[0].ops
    assert all("conv2d" not in k.ops for k in cm.kernels)


def test_disabled_it_leaves_the_convolutions_alone():
    out = run_pipeline(small_cnn(), LEVEL, disabled_passes=["layout"])
    assert "conv2d_nchwc" not in ops(out) and "layout_transform" not in ops(out)


def test_blocked_epilogues_fuse_into_the_convolution():
    cm = compiled_same(small_cnn(), opt_level=3, disabled_passes=["winograd"])
    kernels = [k.ops for k in cm.kernels]
    assert ("conv2d_nchwc", "relu") in kernels
    assert any(k[:2] == ("conv2d_nchwc", "add") for k in kernels)  # bias and relu in the conv's kernel
    assert ("conv2d_nchwc", "clip", "add") in kernels  # depthwise, clip, residual add


def test_conversions_only_where_nchw_is_needed():
    """A blocked value that is a graph output is converted (keeping its name); the last conv,
    whose result only goes on to a reshape, writes NCHW itself."""
    g = Graph("boundaries")
    x = g.add_input("x", TensorType((2, 16, 8, 8)))
    r = op(g, "relu", conv(g, x, 16))
    y = op(g, "relu", conv(g, r, 32))
    g.set_outputs([op(g, "reshape", y, shape=(2, 32 * 64)), r])
    out = dce(layout(g))
    assert len(conversions(out)) == 1
    first, second = [n for n in out.nodes if n.op == "conv2d_nchwc"]
    assert first.attrs["out_layout"] == "NCHWc" and second.attrs["out_layout"] == "NCHW"
    assert second.inputs[0].type.rank == 5 and second.outputs[0].type.rank == 4
    (back,) = [n for n in out.nodes if n.op == "layout_transform" and n.attrs["dst"] == "NCHW"]
    assert back.outputs[0].name == r.name  # the graph output r, converted once
    check_same(g, out, **TOL)
    compiled_same(g, opt_level=LEVEL)


def test_a_plain_operand_joins_the_layout_once():
    """A residual add with the (NCHW) graph input: the input is converted once for both adds."""
    g = Graph("residual")
    x = g.add_input("x", TensorType((1, 16, 6, 6)))
    y = op(g, "add", conv(g, x, 16), x)
    y = op(g, "add", conv(g, y, 16), x)
    g.set_outputs([op(g, "relu", conv(g, y, 16))])
    out = dce(layout(g))
    to_blocked = [n for n in out.nodes if n.op == "layout_transform" and n.inputs[0].name == "x"]
    assert len(to_blocked) == 1 and to_blocked[0].attrs["dst"] == blocked(16)
    check_same(g, out, **TOL)


def test_batch_norm_and_per_pixel_constants_follow_the_layout():
    g = Graph("bn")
    x = g.add_input("x", TensorType((1, 16, 5, 5)))
    y = conv(g, x, 32)
    stats = [g.add_constant(random_array((32,)) + 1.5, name) for name in ("mean", "var", "gamma", "beta")]
    y = op(g, "batch_norm", y, *stats, eps=1e-3)
    y = op(g, "mul", y, g.add_constant(random_array((1, 1, 5, 5)), "mask"))
    y = op(g, "sub", g.add_constant(random_array(()), "s"), y)
    g.set_outputs([op(g, "global_avg_pool", conv(g, y, 16))])
    out = run_pipeline(g, LEVEL)
    assert "batch_norm" not in ops(out) and "global_avg_pool" not in ops(out)
    assert all(v.type.rank == 5 for n in out.nodes if n.op in ("mul", "add", "sub", "mean") for v in n.outputs)
    assert ops(out)[-1] == "layout_transform"  # only the output goes back to NCHW
    check_same(g, out, **TOL)
    compiled_same(g, opt_level=LEVEL)


def test_grouped_convolutions_whose_groups_fill_blocks_are_blocked():
    """ResNeXt's bottleneck: 1x1, grouped 3x3 (blocks spanning groups of 8), 1x1; no conversion
    between them, the grouped weights constant and block-diagonal."""
    g = Graph("resnext")
    x = g.add_input("x", TensorType((1, 16, 6, 7)))
    y = op(g, "relu", conv(g, op(g, "relu", conv(g, op(g, "relu", conv(g, x, 32, k=1)), 32, groups=4)), 16, k=1))
    g.set_outputs([y])
    out = dce(layout(g))
    assert ops(out).count("conv2d_nchwc") == 3 and "conv2d" not in ops(out)
    assert conversions(out) == []  # the first reads NCHW, the last writes it
    grouped, = (n for n in out.nodes if n.op == "conv2d_nchwc" and n.attrs["groups"] == 4)
    assert out.is_constant(grouped.inputs[1]) and grouped.inputs[1].shape == (2, 1, 3, 3, 16, 16)
    check_same(g, out, **TOL)


def test_grouped_convolutions_over_padded_channels_take_a_group_of_padding():
    """RegNet's 104 channels in groups of 8, in 16-lane blocks (here 1.5 blocks in groups of half
    a block): padded to whole blocks, the padding one more group of zero weights, blocked with no
    conversion around it; the padding lanes that a sigmoid made 0.5 reach no real channel."""
    c, width = LANES + LANES // 2, LANES // 2
    g = Graph("regnet")
    x = g.add_input("x", TensorType((1, 16, 6, 7)))
    y = op(g, "sigmoid", conv(g, x, c, k=1))
    y = op(g, "relu", conv(g, op(g, "relu", conv(g, y, c, groups=c // width)), 16, k=1))
    g.set_outputs([y])
    out = dce(layout(g))
    assert ops(out).count("conv2d_nchwc") == 3 and "conv2d" not in ops(out)
    assert [n for n in conversions(out) if n.attrs["src"] != "OIHW"] == []  # (padded weights: folded later)
    grouped, = (n for n in out.nodes if n.op == "conv2d_nchwc" and n.attrs["groups"] != 1)
    assert grouped.attrs["groups"] == c // width + 1 and out.is_constant(grouped.inputs[1])
    check_same(g, out, **TOL)


def test_a_transition_stays_blocked_through_its_average_pool():
    """DenseNet's transition, a 1x1 convolution then a 2x2 average, and the convolution after it:
    no conversion between them."""
    g = Graph("transition")
    x = g.add_input("x", TensorType((1, 16, 8, 8)))
    y = op(g, "avg_pool2d", op(g, "relu", conv(g, x, 32, k=1)), kernel=(2, 2), strides=(2, 2))
    g.set_outputs([op(g, "relu", conv(g, y, 16))])
    out = dce(layout(g))
    assert "avg_pool2d_nchwc" in ops(out) and "avg_pool2d" not in ops(out)
    assert conversions(out) == []
    check_same(g, out, **TOL)


def test_a_large_last_convolution_writes_blocked_and_converts_after():
    """A last conv of MIN_BLOCKED_OUT multiply-adds or more writes its blocks in vectors and is
    converted once after, where written as NCHW it would store element by element; compiled, its
    3x3 then goes to Winograd's form."""
    g = Graph("large_last")
    x = g.add_input("x", TensorType((1, 32, 16, 16)))
    y = op(g, "relu", conv(g, op(g, "relu", conv(g, x, 64)), 64))  # 64 * 64 * 9 * 256: 9.4M multiply-adds
    g.set_outputs([op(g, "reshape", y, shape=(1, 64 * 256))])
    out = dce(layout(g))
    assert [n.attrs["out_layout"] for n in out.nodes if n.op == "conv2d_nchwc"] == ["NCHWc", "NCHWc"]
    assert len(conversions(out)) == 1
    check_same(g, out, **TOL)
    cm, x = ember.compile(g), random_array(g.inputs[0].shape)
    assert "conv2d_winograd" in [op for k in cm.kernels for op in k.ops]
    want = ember.compile(g, opt_level=0)(x)  # Winograd's rounding: to the scale of the outputs
    np.testing.assert_allclose(cm(x), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_isolated_and_unblockable_convolutions_stay_conv2d():
    g = Graph("alone")
    x = g.add_input("x", TensorType((1, 16, 6, 6)))
    y = op(g, "relu", conv(g, x, 16))  # isolated: NCHW in, and nothing after it takes a blocked input
    g.set_outputs([op(g, "relu", conv(g, conv(g, y, 5), 16, k=1)), op(g, "add", y, y)])
    assert layout(g) is not g and ops(layout(g)) == ops(g)  # 5 channels: no block; the rest is isolated
    g = Graph("grouped")
    x = g.add_input("x", TensorType((1, 16, 6, 6)))
    y = op(g, "relu", conv(g, op(g, "relu", conv(g, x, 32)), 32))
    g.set_outputs([conv(g, y, 32, groups=16)])  # groups of 2 channels: a block would span 8 of them
    out = dce(layout(g))
    assert ops(out).count("conv2d") == 1 and ops(out).count("conv2d_nchwc") == 2
    assert conversions(out) == []  # the conv before it writes NCHW
    assert [n.attrs["out_layout"] for n in out.nodes if n.op == "conv2d_nchwc"] == ["NCHWc", "NCHW"]
    check_same(g, out, **TOL)


@pytest.mark.parametrize("chain, left", [
    (("NCHW16c", "NCHW"), []),  # there and back: nothing
    (("NCHW16c", "NCHW8c", "NCHW"), []),
    (("NCHW8c", "NCHW16c"), [("NCHW", "NCHW16c")]),  # a chain: one conversion
])
def test_adjacent_conversions_cancel(chain, left):
    g = Graph("conversions")
    x = g.add_input("x", TensorType((1, 32, 4, 4)))
    y, src = x, "NCHW"
    for dst in chain:
        y, src = op(g, "layout_transform", y, src=src, dst=dst), dst
    g.set_outputs([op(g, "relu", y)])
    out = dce(layout(g))
    assert [(n.attrs["src"], n.attrs["dst"]) for n in out.nodes if n.op == "layout_transform"] == left
    assert ops(out)[-1] == "relu"
    check_same(g, out, rtol=0, atol=0)


def test_blocked_graph_input_converted_directly():
    """NCHW16c -> NCHW -> NCHW8c of an input in NCHW16c becomes one conversion."""
    g = Graph("reblock")
    x = g.add_input("x", TensorType((1, 2, 3, 3, 16)))
    y = op(g, "layout_transform", x, src="NCHW16c", dst="NCHW")
    z = op(g, "layout_transform", y, src="NCHW", dst="NCHW8c")
    g.set_outputs([op(g, "exp", z), op(g, "relu", y)])
    out = dce(layout(g))
    assert sorted((n.attrs["src"], n.attrs["dst"]) for n in out.nodes if n.op == "layout_transform") == [
        ("NCHW16c", "NCHW"), ("NCHW16c", "NCHW8c")]
    check_same(g, out, rtol=0, atol=0)


def test_a_graph_without_convolutions_is_unchanged():
    g = Graph("plain")
    x = g.add_input("x", TensorType((2, 16, 4, 4)))
    g.set_outputs([op(g, "mean", op(g, "relu", x), axes=(2, 3), keepdims=True)])
    assert ops(layout(g)) == ops(g) and "layout" in PIPELINES[LEVEL]


def test_a_symbolic_batch_stays_symbolic():
    g = Graph("batch")
    x = g.add_input("x", TensorType(("n", 16, 6, 6)))
    y = op(g, "relu", conv(g, x, 16))
    g.set_outputs([op(g, "add", conv(g, y, 32), g.add_constant(random_array((32, 1, 1)), "bias"))])
    out = run_pipeline(g, LEVEL)
    assert ops(out).count("conv2d_nchwc") == 2 and out.nodes[0].outputs[0].shape[0] == "n"
    cm, plain = ember.compile(g, opt_level=LEVEL), ember.compile(g, opt_level=0)
    for n in (1, 3):
        x = random_array((n, 16, 6, 6))
        np.testing.assert_allclose(cm(x), plain(x), **TOL)


def test_channels_no_block_divides_are_padded_to_whole_blocks():
    """A block and a half of channels (MobileNetV2's 24 in 16-lane blocks) run in two whole
    blocks: weights and biases padded with zeros, the dense convolution that reads them summing
    over the real channels only (in_channels), cropped where they leave the layout (a graph
    output, a convolution that writes NCHW)."""
    c = LANES * 3 // 2
    g = Graph("padded")
    x = g.add_input("x", TensorType((1, 16, 10, 10)))
    e = op(g, "clip", conv(g, x, c, k=1), min=0.0, max=6.0)
    d = op(g, "clip", conv(g, e, c, groups=c, bias=False, strides=(2, 2)), min=0.0, max=6.0)
    stats = [g.add_constant(random_array((c,)) + 1.5, name) for name in ("mean", "var", "gamma", "beta")]
    r = op(g, "add", op(g, "batch_norm", conv(g, d, c, k=1), *stats, eps=1e-3), d)
    y = op(g, "sigmoid", conv(g, r, 32))  # (reads the padded r)
    g.set_outputs([op(g, "reshape", conv(g, y, c), shape=(1, c * 25)), r,
                   op(g, "mean", r, axes=(2, 3), keepdims=True)])
    out = run_pipeline(g, LEVEL)
    convs = [n for n in out.nodes if n.op == "conv2d_nchwc"]
    assert len(convs) == 5 and "conv2d" not in ops(out)
    widths = [n.outputs[0].shape[1] * (n.outputs[0].shape[4] if n.outputs[0].type.rank == 5 else 1) for n in convs]
    assert widths == [2 * LANES] * 3 + [32, 2 * LANES]
    assert convs[1].attrs["groups"] == 2 * LANES
    assert [n.attrs["in_channels"] for n in convs] == [None, None, c, c, None]
    check_same(g, out, **TOL)
    compiled_same(g, opt_level=LEVEL)


def test_padded_channels_match_torch():
    """An inverted residual block on a block and a half of channels against torch."""
    torch = pytest.importorskip("torch")
    c = LANES * 3 // 2
    torch.manual_seed(0)

    def unit(cin, cout, k=1, groups=1, act=True):
        return [torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups), torch.nn.BatchNorm2d(cout)] + (
            [torch.nn.ReLU6()] if act else [])

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Sequential(*unit(8, c))
            self.body = torch.nn.Sequential(*unit(c, 6 * c), *unit(6 * c, 6 * c, 3, 6 * c), *unit(6 * c, c, act=False))

        def forward(self, x):
            y = self.stem(x)
            return (y + self.body(y)).mean((2, 3))

    model = Block().eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
    x = random_array((1, 8, 12, 12))
    got = ember.compile(model, (torch.from_numpy(x),))(x)
    np.testing.assert_allclose(got, model(torch.from_numpy(x)).detach().numpy(), **TOL)
