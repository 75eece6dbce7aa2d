"""conv2d_nchwc_bf16 (ember.ops.conv_bf16) against NumPy's convolution of bf16-rounded operands
summed in float64: on this CPU's AVX512-BF16 tile where it has one (ember.intrinsics.conv_bf16),
on an AVX2 target and the interpreter (the same products on fp32 vectors); AMX's tile scheduled
for a Sapphire Rapids target, on the interpreter, compiled for that target, and run here."""

import re

import numpy as np
import pytest

import ember
from ember.errors import ScheduleError
from ember.graph.core import TensorType
from ember.intrinsics import conv_bf16, cpu_has
from ember.ops.conv_bf16 import pack, unpack
from ember.ops.layout import convert_layout
from ember.ops.registry import get, infer_types
from ember.runtime.build import build_library
from ember.runtime.module import build_c_module
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import assert_close, check_op, check_op_sizes, random_array
from ember.tir.tensor_intrin import get_intrin

OP = "conv2d_nchwc_bf16"
TILE_CALL = re.compile(r"ember_(?:amx_)?bf16conv_\w+\(\(const void\*\)")


def operands(n, c, hw, oc, k, in_block, bias=True, seed=0):
    """x in NCHW{in_block}c (or NCHW when in_block is c), w packed, the bias."""
    rng = np.random.default_rng(seed)
    x, w = random_array((n, c, *hw), rng=rng), random_array((oc, c, k, k), rng=rng)
    x = x if in_block == c else convert_layout(x, "NCHW", f"NCHW{in_block}c")
    return [x, pack(w, in_block)] + ([random_array((oc,), rng=rng)] if bias else [])


def attrs(stride=1, padding=(0, 0, 0, 0), dilation=1, out_layout="NCHWc"):
    return {"strides": (stride, stride), "padding": padding, "dilations": (dilation, dilation),
            "out_layout": out_layout}


def test_packing_round_trips_with_an_odd_block():
    w = random_array((32, 6, 3, 3), rng=np.random.default_rng(4))
    packed = pack(w, 3)  # two blocks of 3 channels, each in 2 pairs, the last pair's second zero
    assert packed.shape == (2, 2, 3, 3, 2, 16, 2) and not packed[:, :, :, :, 1, :, 1].astype(np.float32).any()
    np.testing.assert_array_equal(unpack(packed, 3), w.astype(packed.dtype))


CASES = [  # (x: n, c, (h, w), oc, k, in block; attrs)
    ((1, 32, (8, 8), 32, 3, 16), attrs(padding=(1, 1, 1, 1))),  # 3x3, two blocks of each
    ((1, 3, (9, 11), 16, 3, 3), attrs(stride=2, padding=(1, 0, 1, 1))),  # a first layer: 3 channels, stride 2
    ((2, 24, (6, 6), 48, 1, 8), attrs(out_layout="NCHW")),  # 1x1 over blocks of 8, written as NCHW
    ((1, 16, (9, 9), 32, 3, 16), attrs(padding=(2, 2, 2, 2), dilation=2)),  # dilated
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(case):
    shape, at = CASES[case]
    inputs = operands(*shape, bias=case != 2, seed=case)
    targets = ["c", "python", Target.x86("avx2")] if case == 1 else ["c"]  # (the interpreter on a small one)
    check_op(OP, inputs, at, rtol=1e-5, atol=1e-5, targets=targets)


@pytest.mark.skipif(not cpu_has("avx512_bf16"), reason="this CPU has no avx512_bf16 (/proc/cpuinfo)")
def test_the_tile_where_the_cpu_has_it():
    types = [TensorType((1, 2, 8, 8, 16), "float32"), TensorType((2, 2, 3, 3, 8, 16, 2), "bfloat16")]
    source = ember.build(*node_kernel(OP, types, *infer_types(OP, types, attrs(padding=(1, 1, 1, 1)))),
                         target="c").source
    assert len(TILE_CALL.findall(source)) == 1 and source.count("_mm512_dpbf16_ps(") == 8 * 2  # 8 x 2 tiles


@pytest.fixture(scope="module")
def sapphire_rapids():
    return Target("c", cflags=Target().cflags.replace("-march=native", "") + " -march=sapphirerapids")


def test_the_amx_tile_on_the_interpreter_compiled_for_sapphire_rapids_and_run_here(sapphire_rapids):
    """Scheduled for a target with AMX: the interpreter runs the tile's description in each call's
    place; the C compiles for that target; built for this machine, each call computes its sums
    in C where Linux refuses the tile state (a CPU without AMX), AMX's tiles where it grants it."""
    inputs = operands(1, 16, (4, 4), 32, 3, 8, seed=5)  # two blocks of 8 channels in, two of 16 out
    at = attrs(stride=1, padding=(1, 1, 1, 1))
    types = [TensorType(x.shape, x.dtype.name) for x in inputs]
    bound, out_types = infer_types(OP, types, at)
    expected = get(OP).reference(inputs, bound)[0]
    s, args = node_kernel(OP, types, bound, out_types, target=sapphire_rapids)
    out = np.full(out_types[0].shape, np.nan, np.float32)
    ember.build(s, args, target="python")(*inputs, out)
    assert_close(out, expected, 1e-5, 1e-5, "the tile on the interpreter")
    func = ember.lower(s, args, name="conv_bf16_spr")
    source = sapphire_rapids.backend.render_kernels([func], sapphire_rapids)
    assert TILE_CALL.findall(source) == ["ember_amx_bf16conv_4x32_2x3x3x8_s1_d1x1((const void*)"]
    assert all(f"_tile_{op}(" in source for op in ("loadconfig", "loadd", "dpbf16ps", "stored"))
    build_library(source, cc=sapphire_rapids.cc, cflags=sapphire_rapids.cflags)
    here = Target()
    built = build_c_module([func], cc=here.cc, cflags=here.cflags, align=here.align)["conv_bf16_spr"]
    out = np.full(out_types[0].shape, np.nan, np.float32)
    built(*inputs, out)
    assert_close(out, expected, 1e-5, 1e-5, f"the AMX tile here (amx_bf16: {cpu_has('amx_bf16')})")


def test_tile_choice():
    assert conv_bf16.choose(56, 4) == (14, 2)  # 28 accumulators
    assert conv_bf16.choose(7, 8) == (7, 2)
    assert conv_bf16.choose(112, 1) == (28, 1)  # one block of 16 channels
    assert conv_bf16.choose(29, 2) is None  # no tile of 2 or more columns divides the row


def test_a_tile_is_found_by_its_name():
    """As a kernel lowered in another process names it: declared from the name alone."""
    name = "bf16conv_6x32_3x1x3x8_s2_d1x1"  # 6 columns x 2 blocks, 3 blocks of 8 channels, 1x3 taps, stride 2
    intrin = get_intrin(name)
    assert intrin.name == name and intrin.feature == conv_bf16.FEATURE
    with pytest.raises(ScheduleError, match="at most 28 accumulators"):
        conv_bf16.intrin(conv_bf16.ConvTile(16, 2, 1, 1, 1, 8))


def test_a_symbolic_batch():
    """One kernel for any batch (a model compiled with dynamic_shapes): batches of 1 and 3."""
    sets = [operands(n, 32, (5, 5), 32, 3, 16, seed=n) for n in (1, 3)]
    types = [TensorType(("batch", 2, 5, 5, 16), "float32"), TensorType(sets[0][1].shape, "bfloat16"),
             TensorType((32,), "float32")]
    check_op_sizes(OP, types, attrs(padding=(1, 1, 1, 1)), sets, rtol=1e-5, atol=1e-5)
