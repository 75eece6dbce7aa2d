"""The ONNX frontend, operator family by operator family: small models in ONNX's text format,
imported and run by ember, compared with onnxruntime; symbolic dimensions; the errors."""

import numpy as np
import pytest
from onnx_check import check_onnx, onnx_model, random_inputs

from ember.frontend.onnx import MAX_OPSET, ConstantInputError, OnnxImportError, import_onnx
from ember.ops import UnsupportedOpError
from ember.ops.registry import OpTypeError

RTOL, ATOL = 1e-4, 1e-4  # float32 throughout; onnxruntime and the references differ in the last bits


@pytest.fixture
def rng():
    return np.random.default_rng()


def check(rng, text: str, opset: int = 17, low: float = -3.0, high: float = 3.0, **initializers):
    model = onnx_model(text, opset, **initializers)
    return check_onnx(model, random_inputs(model, rng, low=low, high=high), RTOL, ATOL)


def ops_of(graph) -> list[str]:
    return [n.op for n in graph.nodes]


# -- elementwise ----------------------------------------------------------------------------

UNARY = ["Neg", "Abs", "Exp", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tanh", "Erf", "Sigmoid", "Relu",
         "HardSwish", "Softplus", "Identity"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(rng, op):
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = {op}(x) }}")


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_of_positive_inputs(rng, op):
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = {op}(x) }}", low=0.1)


@pytest.mark.parametrize("node", [
    "LeakyRelu <alpha = 0.2>(x)", "Elu <alpha = 0.5>(x)", "HardSigmoid(x)", "HardSigmoid <alpha = 0.1666667>(x)",
    "Softmax <axis = 1>(x)", "LogSoftmax(x)", "Softmax(x)",
])
def test_activation(rng, node):
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = {node} }}")


@pytest.mark.parametrize("node", [
    "Selu(x)", "Celu <alpha = 2.0>(x)", "Softsign(x)", "Mish(x)", "ThresholdedRelu <alpha = 0.5>(x)",
    "Shrink <lambd = 1.0, bias = 0.5>(x)", "Tan(x)", "Sinh(x)", "Cosh(x)", "LRN <size = 3, alpha = 0.01>(x)",
    "DepthToSpace <blocksize = 2>(x)", 'DepthToSpace <blocksize = 2, mode = "CRD">(x)', "Trilu(x)",
    "Trilu <upper = 0>(x, k)",
])
def test_decomposed_operator(rng, node):
    check(rng, f"g (float[2, 4, 3, 5] x) => (float y) {{ y = {node} }}", opset=18, low=-1.0, high=1.0,
          k=np.array(1))


def test_mean_variance_normalization(rng):  # (ONNX cannot infer its output shape: declared)
    check(rng, "g (float[2, 4, 3, 5] x) => (float[2, 4, 3, 5] y) { y = MeanVarianceNormalization(x) }")


def test_space_to_depth(rng):
    check(rng, "g (float[2, 3, 4, 6] x) => (float y) { y = SpaceToDepth <blocksize = 2>(x) }")


def test_is_nan_and_is_inf(rng):
    model = onnx_model("""g (float[6] x) => (bool n, bool i, bool p) {
        n = IsNaN(x)
        i = IsInf(x)
        p = IsInf <detect_negative = 0>(x)
    }""")
    check_onnx(model, [np.array([0, np.nan, np.inf, -np.inf, 1, -2], "float32")], RTOL, ATOL)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_of_opset_20(rng, approximate):
    check(rng, f'g (float[2, 8] x) => (float y) {{ y = Gelu <approximate = "{approximate}">(x) }}', opset=20)


def test_clip_with_constant_and_computed_bounds(rng):
    graph = check(rng, "g (float[4, 5] x) => (float y) { y = Clip(x, lo, hi) }",
                  lo=np.float32(-0.5), hi=np.float32(1.5))
    assert ops_of(graph) == ["clip"]
    graph = check(rng, "g (float[4, 5] x, float lo) => (float y) { y = Clip(x, lo) }")
    assert ops_of(graph) == ["maximum"]


def test_prelu(rng):
    check(rng, "g (float[2, 3, 4] x) => (float y) { y = PRelu(x, slope) }",
          slope=rng.uniform(0, 1, (3, 1)).astype("float32"))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
def test_binary_broadcasting(rng, op):
    check(rng, f"g (float[2, 3, 4] a, float[3, 1] b) => (float y) {{ y = {op}(a, b) }}", low=0.5)


def test_variadic_max_of_three(rng):
    check(rng, "g (float[2, 3] a, float[3] b, float[2, 1] c) => (float y) { y = Max(a, b, c) }")


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparison(rng, op):
    check(rng, f"g (int64[3, 4] a, int64[4] b) => (bool y) {{ y = {op}(a, b) }}")


def test_logic_and_where(rng):
    check(rng, """g (bool[3, 4] a, bool[4] b, float[3, 4] x, float[3, 4] z) => (bool p, bool q, bool r, float w) {
        p = And(a, b)
        q = Or(a, b)
        nb = Not(b)
        r = Xor(a, nb)
        w = Where(a, x, z)
    }""")


def test_pow_with_an_integer_exponent(rng):
    check(rng, "g (float[3, 4] x, int64[4] e) => (float y) { y = Pow(x, e) }")


def test_integer_div_and_mod(rng):
    model = onnx_model("""g (int64[3, 4] a, int64[3, 4] b) => (int64 q, int64 m, int64 f) {
        q = Div(a, b)
        m = Mod(a, b)
        f = Mod <fmod = 1>(a, b)
    }""")
    a = rng.integers(-20, 20, (3, 4))
    b = rng.integers(1, 6, (3, 4)) * rng.choice([-1, 1], (3, 4))
    check_onnx(model, [a, b], RTOL, ATOL)


def test_float_fmod(rng):
    check(rng, "g (float[3, 4] a, float[3, 4] b) => (float y) { y = Mod <fmod = 1>(a, b) }", low=-5.0, high=5.0)


def test_cast_and_cast_like(rng):
    graph = check(rng, """g (float[3, 4] x, int32[2] like) => (int32 i, float f, bool b, int32 l, float same) {
        i = Cast <to = 6>(x)
        f = Cast <to = 1>(i)
        b = Cast <to = 9>(i)
        l = CastLike(x, like)
        same = Cast <to = 1>(x)
    }""")
    assert ops_of(graph).count("cast") == 4  # a cast to the input's own type is the input


# -- convolution, matmul --------------------------------------------------------------------


def weights(rng, *shape):
    return rng.uniform(-1, 1, shape).astype("float32")


@pytest.mark.parametrize("attrs", [
    "", "<pads = [1, 2, 1, 0], strides = [2, 1]>", "<dilations = [2, 2], pads = [2, 2, 2, 2]>",
    '<auto_pad = "SAME_UPPER", strides = [2, 2]>', '<auto_pad = "SAME_LOWER">', '<auto_pad = "VALID">',
])
def test_conv2d(rng, attrs):
    check(rng, f"g (float[1, 4, 9, 8] x) => (float y) {{ y = Conv {attrs}(x, w, b) }}",
          w=weights(rng, 6, 4, 3, 3), b=weights(rng, 6))


def test_grouped_conv2d_without_bias(rng):
    check(rng, "g (float[2, 4, 7, 7] x) => (float y) { y = Conv <group = 2>(x, w) }", w=weights(rng, 6, 2, 3, 3))


def test_conv1d(rng):
    check(rng, "g (float[2, 3, 10] x) => (float y) { y = Conv <pads = [1, 1], strides = [2]>(x, w, b) }",
          w=weights(rng, 5, 3, 3), b=weights(rng, 5))


@pytest.mark.parametrize("attrs", [
    "", "<strides = [2, 2], output_padding = [1, 0], pads = [1, 0, 0, 1]>", "<group = 2, dilations = [2, 1]>",
    "<strides = [2, 2], output_shape = [10, 9]>", "<strides = [2, 2], output_shape = [12, 10]>",
    '<strides = [2, 2], auto_pad = "SAME_UPPER">',
])
def test_conv_transpose2d(rng, attrs):
    check(rng, f"g (float[1, 4, 5, 4] x) => (float y) {{ y = ConvTranspose {attrs}(x, w, b) }}",
          w=weights(rng, 4, 3, 3, 3), b=weights(rng, 6 if "group" in attrs else 3))


def test_conv_transpose1d(rng):
    check(rng, "g (float[1, 4, 6] x) => (float y) { y = ConvTranspose <strides = [3], pads = [1, 0]>(x, w) }",
          w=weights(rng, 4, 2, 4))


@pytest.mark.parametrize("attrs", ["", "<transB = 1, alpha = 0.5, beta = 2.0>", "<transA = 1>"])
def test_gemm(rng, attrs):
    a_shape = "[6, 4]" if "transA" in attrs else "[4, 6]"
    b = weights(rng, 5, 6) if "transB" in attrs else weights(rng, 6, 5)
    check(rng, f"g (float{a_shape} a) => (float y) {{ y = Gemm {attrs}(a, b, c) }}", b=b, c=weights(rng, 5))


def test_batched_matmul_broadcasting(rng):
    check(rng, "g (float[2, 1, 3, 4] a, float[5, 4, 6] b, float[4] v) => (float y, float z) "
               "{ y = MatMul(a, b)\n z = MatMul(a, v) }")


# -- normalization --------------------------------------------------------------------------


def test_batch_normalization(rng):
    check(rng, "g (float[2, 3, 4, 5] x) => (float y) { y = BatchNormalization <epsilon = 0.001>(x, s, b, m, v) }",
          s=weights(rng, 3), b=weights(rng, 3), m=weights(rng, 3), v=rng.uniform(0.5, 2, 3).astype("float32"))


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(rng, axis):
    shape = (4,) if axis == -1 else (3, 4)
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = LayerNormalization <axis = {axis}>(x, s, b) }}",
          s=weights(rng, *shape), b=weights(rng, *shape))


def test_layer_normalization_with_mean_and_inverse_std_dev(rng):
    check(rng, "g (float[2, 3, 4] x) => (float y, float mean, float inv) "
               "{ y, mean, inv = LayerNormalization <epsilon = 0.01>(x, s) }", s=weights(rng, 4))


def test_layer_normalization_with_broadcast_scale(rng):
    check(rng, "g (float[2, 3, 4] x) => (float y) { y = LayerNormalization <axis = 1>(x, s, b) }",
          s=weights(rng, 1, 4), b=weights(rng, 4))


def test_instance_normalization(rng):
    check(rng, "g (float[2, 3, 4, 5] x) => (float y) { y = InstanceNormalization(x, s, b) }",
          s=weights(rng, 3), b=weights(rng, 3))


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(rng, opset):
    n = 2 if opset == 18 else 6  # scale and bias per group in opset 18, per channel in 21
    check(rng, "g (float[2, 6, 3, 3] x) => (float[2, 6, 3, 3] y) { y = GroupNormalization <num_groups = 2>(x, s, b) }",
          opset=opset, s=weights(rng, n), b=weights(rng, n))


# -- pooling --------------------------------------------------------------------------------


@pytest.mark.parametrize("node", [
    "MaxPool <kernel_shape = [3, 3]>", "MaxPool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]>",
    "MaxPool <kernel_shape = [3, 2], strides = [2, 2], ceil_mode = 1>",
    "MaxPool <kernel_shape = [2, 2], dilations = [2, 2]>",
    'MaxPool <kernel_shape = [3, 3], strides = [2, 2], auto_pad = "SAME_UPPER">',
    "AveragePool <kernel_shape = [2, 2], strides = [2, 2]>",
    "AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]>",
    "AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 1>",
    "AveragePool <kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1>",
    "GlobalAveragePool", "GlobalMaxPool",
])
def test_pool2d(rng, node):
    check(rng, f"g (float[2, 3, 9, 8] x) => (float y) {{ y = {node}(x) }}")


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool1d(rng, op):
    check(rng, f"g (float[2, 3, 9] x) => (float y) {{ y = {op} <kernel_shape = [3], strides = [2]>(x) }}")


# -- reductions -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_with_axes_as_input(rng, op, keepdims):  # opset 18: every Reduce* takes its axes as an input
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = {op} <keepdims = {keepdims}>(x, axes) }}",
          opset=18, low=0.5, high=1.5, axes=np.array([0, -1]))


def test_reduce_with_axes_as_attribute(rng):  # opset 17: all but ReduceSum take an attribute
    check(rng, """g (float[2, 3, 4] x) => (float a, float b, float c) {
        a = ReduceMean <axes = [1]>(x)
        b = ReduceMax <keepdims = 0>(x)
        c = ReduceSum <keepdims = 0>(x, axes)
    }""", axes=np.array([2]))


def test_reduce_with_no_axes(rng):
    graph = check(rng, """g (float[2, 3] x) => (float all, float same) {
        all = ReduceSum(x)
        same = ReduceSum <noop_with_empty_axes = 1>(x)
    }""")
    assert ops_of(graph) == ["sum", "identity"]


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", ["", "<axis = 1, keepdims = 0>", "<axis = -1, select_last_index = 1>"])
def test_arg_reduce(rng, op, attrs):
    check(rng, f"g (int64[3, 4, 5] x) => (int64 y) {{ y = {op} {attrs}(x) }}")  # small ints: ties


@pytest.mark.parametrize("attrs", ["", "<exclusive = 1>", "<reverse = 1>", "<exclusive = 1, reverse = 1>"])
def test_cumsum(rng, attrs):
    check(rng, f"g (float[3, 4] x) => (float y) {{ y = CumSum {attrs}(x, axis) }}", axis=np.array(1))


# -- shape and data movement ----------------------------------------------------------------


def test_reshape_resolves_zero_and_minus_one(rng):
    graph = check(rng, """g (float[2, 3, 4] x) => (float a, float b, float c) {
        a = Reshape(x, s1)
        b = Reshape(x, s2)
        c = Reshape(x, s3)
    }""", s1=np.array([0, -1]), s2=np.array([-1, 2, 2]), s3=np.array([2, 3, 4]))
    assert [n.attrs.get("shape") for n in graph.nodes] == [(2, 12), (6, 2, 2), None]  # c is x: an identity


def test_shape_arithmetic_is_folded(rng):
    graph = check(rng, """g (float[2, 3, 4] x) => (float y) {
        s = Shape(x)
        batch = Gather <axis = 0>(s, zero)
        n = Size(x)
        rest = Div(n, batch)
        batch1 = Unsqueeze(batch, axes)
        rest1 = Unsqueeze(rest, axes)
        target = Concat <axis = 0>(batch1, rest1)
        y = Reshape(x, target)
    }""", zero=np.array(0), axes=np.array([0]))
    assert ops_of(graph) == ["reshape"] and not graph.constants


def test_constant_of_shape_range_and_constant(rng):
    graph = check(rng, """g (float[2, 3] x) => (float y, int64 r) {
        s = Shape(x)
        ones = ConstantOfShape <value = float[1] {1.5}>(s)
        y = Add(x, ones)
        n = Constant <value_int = 5>()
        two = Constant <value = int64 {2}>()
        r = Range(two, n, one)
    }""", one=np.array(1))
    assert ops_of(graph) == ["add", "identity"]  # r is a constant: passed through identity


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_flatten(rng, axis):
    check(rng, f"g (float[2, 3, 4] x) => (float y) {{ y = Flatten <axis = {axis}>(x) }}")


def test_squeeze_unsqueeze_transpose(rng):
    check(rng, """g (float[2, 1, 3, 1] x) => (float a, float b, float c, float d) {
        a = Squeeze(x, axes)
        b = Squeeze(x)
        c = Unsqueeze(x, axes2)
        d = Transpose <perm = [3, 0, 2, 1]>(x)
    }""", axes=np.array([-1]), axes2=np.array([0, 5]))


def test_transpose_default_reverses(rng):
    check(rng, "g (float[2, 3, 4] x) => (float y) { y = Transpose(x) }")


def test_concat_with_a_constant(rng):
    check(rng, "g (float[2, 3] x, float[2, 1] z) => (float y) { y = Concat <axis = -1>(x, c, z) }",
          c=weights(rng, 2, 2))


@pytest.mark.parametrize("size, node, opset", [
    (7, "a, b, c = Split <axis = 1>(x, sizes)", 17),
    (6, "a, b, c = Split <axis = 1>(x)", 17),
    (7, "a, b, c = Split <axis = 1, num_outputs = 3>(x)", 18),
])
def test_split(rng, size, node, opset):
    check(rng, f"g (float[2, {size}, 3] x) => (float a, float b, float c) {{ {node} }}", opset=opset,
          sizes=np.array([1, 4, 2]))


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1, 0], [3, 100], None, None), ([-1], [-1000], [1], [-2]), ([0, 1], [4, -1], [2, 0], [2, 1]),
])
def test_slice(rng, starts, ends, axes, steps):
    inits = {"starts": np.array(starts), "ends": np.array(ends)}
    args = "x, starts, ends"
    if axes is not None:
        inits |= {"axes": np.array(axes), "steps": np.array(steps)}
        args += ", axes, steps"
    check(rng, f"g (float[4, 5, 6] x) => (float y) {{ y = Slice({args}) }}", **inits)


def test_gather(rng):
    check(rng, """g (float[5, 4] x, int64[2, 3] i) => (float a, float b, float c) {
        a = Gather(x, i)
        b = Gather <axis = 1>(x, neg)
        c = Gather <axis = 1>(x, scalar)
    }""", neg=np.array([-1, 0, 2]), scalar=np.array(3))


def test_expand_broadcasts_both_ways(rng):
    check(rng, """g (float[3, 1] x) => (float a, float b) {
        a = Expand(x, s1)
        b = Expand(x, s2)
    }""", s1=np.array([2, 1, 4]), s2=np.array([1, 1]))


def test_tile(rng):
    check(rng, "g (float[2, 3] x) => (float y) { y = Tile(x, r) }", r=np.array([2, 3]))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(rng, mode):
    check(rng, f'g (float[2, 3, 4] x) => (float y) {{ y = Pad <mode = "{mode}">(x, pads, value) }}',
          pads=np.array([0, 1, 2, 0, 2, 1]), value=np.float32(0.5))


def test_pad_of_given_axes(rng):  # opset 18
    check(rng, "g (float[2, 3, 4] x) => (float y) { y = Pad(x, pads, value, axes) }", opset=18,
          pads=np.array([1, 2, 3, 0]), value=np.float32(-1), axes=np.array([-1, 1]))


@pytest.mark.parametrize("attrs, given", [
    ('<mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor">', "scales"),
    ('<mode = "nearest">', "sizes"),
    ('<mode = "linear">', "scales"),
    ('<mode = "linear", coordinate_transformation_mode = "align_corners">', "sizes"),
    ('<mode = "linear", coordinate_transformation_mode = "pytorch_half_pixel">', "sizes"),
])
def test_resize(rng, attrs, given):
    inputs = "x, , scales" if given == "scales" else "x, , , sizes"
    check(rng, f"g (float[1, 2, 4, 6] x) => (float y) {{ y = Resize {attrs}({inputs}) }}",
          scales=np.array([1, 1, 2, 0.5], "float32"), sizes=np.array([1, 2, 7, 3]))


def test_identity_and_dropout_are_the_input(rng):
    graph = check(rng, """g (float[2, 3] x) => (float y, float z) {
        t = Identity(x)
        d = Dropout(t)
        y = Relu(d)
        z = Dropout(y)
    }""")
    assert ops_of(graph) == ["relu", "identity"]  # an output given twice gets its own value


def test_symbolic_batch(rng):
    model = onnx_model("""g (float[N, 3, 4] x) => (float y) {
        flat = Reshape(x, shape)
        y = Softmax(flat)
    }""", shape=np.array([0, -1]))
    graph = import_onnx(model)
    assert graph.inputs[0].shape == ("N", 3, 4) and graph.outputs[0].shape == ("N", 12)
    for n in (1, 5):
        check_onnx(model, random_inputs(model, rng, {"N": n}), RTOL, ATOL)


def test_symbolic_shape_arithmetic_of_data_movement(rng):
    """Shape -> Slice -> Concat -> Reshape; Gather of a static dimension is a number again."""
    model = onnx_model("""g (float[N, 3, 4] x) => (float y) {
        s = Shape(x)
        lead = Slice(s, zero, one)
        last = Gather(s, two)
        half = Div(last, two)
        target = Concat <axis = 0>(lead, minus_one, half)
        y = Reshape(x, target)
    }""", zero=np.array([0]), one=np.array([1]), two=np.array([2]), minus_one=np.array([-1]))
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["reshape"] and graph.outputs[0].shape == ("N", 6, 2)
    for n in (1, 2):
        check_onnx(model, random_inputs(model, rng, {"N": n}), RTOL, ATOL)


def test_expression_of_symbols_as_a_dimension_is_checked():  # (2 * N is a dimension, not x's size)
    model = onnx_model("""g (float[N, 3] x) => (float y) {
        s = Shape(x)
        twice = Mul(s, two)
        y = Reshape(x, twice)
    }""", two=np.array([2, 1]))
    with pytest.raises(OpTypeError, match=r"cannot reshape \('N', 3\) into \('2\*N', 3\): the sizes differ"):
        import_onnx(model)


def test_input_shapes_make_dynamic_dimensions_static(rng):
    model = onnx_model("g (float[N, 3] x) => (float y) { y = Relu(x) }")
    graph = import_onnx(model, input_shapes={"x": (4, 3)})
    assert graph.inputs[0].shape == (4, 3) and graph.outputs[0].shape == (4, 3)
    with pytest.raises(OnnxImportError, match=r"gives input 'x' the shape \(4, 5\), but the model declares"):
        import_onnx(model, input_shapes={"x": (4, 5)})
    with pytest.raises(OnnxImportError, match=r"input_shapes names \['y'\], which are not inputs"):
        import_onnx(model, input_shapes={"y": (4, 3)})


def test_unnamed_dynamic_dimension_becomes_a_symbol():
    model = onnx_model("g (float[2, 3] x) => (float y) { y = Relu(x) }")
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    assert import_onnx(model).inputs[0].shape == ("x_0", 3)


# -- errors ---------------------------------------------------------------------------------


def test_every_unsupported_operator_is_listed():
    model = onnx_model("""g (float[1, 2, 4, 4] x, float[2, 2] a) => (float y, float z, float e) {
        y = Resize <mode = "linear">(x, , scales)
        t = RandomNormalLike(a)
        z = Relu(t)
        e = RandomNormalLike(a)
        u = RandomUniformLike(a)
    }""", scales=np.array([2, 1, 2, 2], "float32"))
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    message = str(info.value)
    assert "3 unsupported operator(s): RandomNormalLike, RandomUniformLike, " in message
    for line in ["Resize(resizing other dimensions than the spatial ones of N, C, spatial...)  (at Resize node 'y')",
                 "RandomNormalLike  (at RandomNormalLike node 't')", "RandomNormalLike  (at RandomNormalLike node 'e')",
                 "RandomUniformLike  (at RandomUniformLike node 'u')"]:
        assert line in message


def test_operator_of_another_domain_is_listed():
    model = onnx_model("g (float[2] x) => (float y) { y = Relu(x) }")
    model.graph.node[0].domain = "com.microsoft"
    model.opset_import.add(domain="com.microsoft", version=1)
    with pytest.raises(UnsupportedOpError, match=r"com\.microsoft\.Relu"):
        import_onnx(model)


def test_opset_older_than_7_reads_the_operators_unchanged_since(rng):
    check(rng, "g (float[2, 3] x) => (float y) { y = Relu(x) }", opset=6)  # Relu-6, as in opset 7
    model = onnx_model("g (float[2] x) => (float y) { r = Relu(x) y = Add(r, r) }", opset=6)
    with pytest.raises(UnsupportedOpError, match=r"1 unsupported operator\(s\): Add-6\n  Add-6  \(at Add node 'y'\)"):
        import_onnx(model)


def test_opset_newer_than_onnx_knows_is_rejected():
    model = onnx_model("g (float[2] x) => (float y) { y = Relu(x) }")
    model.opset_import[0].version = MAX_OPSET + 1
    with pytest.raises(OnnxImportError, match=rf"opset {MAX_OPSET + 1} is newer than the installed onnx"):
        import_onnx(model)


def test_shape_computed_at_run_time_is_named():
    model = onnx_model("g (float[2, 3] x, int64[2] s) => (float y) { y = Reshape(x, s) }")
    with pytest.raises(ConstantInputError, match=r"Reshape node 'y': input 1 \(shape\) must be a constant"):
        import_onnx(model)


def test_invalid_model_is_rejected():
    model = onnx_model("g (float[2] x) => (float y) { y = Relu(x) }")
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(OnnxImportError, match="not valid ONNX"):
        import_onnx(model)


def test_import_from_a_file(tmp_path, rng):
    model = onnx_model("g (float[2, 3] x) => (float y) { y = Relu(x) }")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert [n.op for n in import_onnx(path).nodes] == ["relu"]
