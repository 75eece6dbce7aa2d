"""Property: any subset of the fp32 passes (FP32_PASSES), in any order (repeats allowed), leaves the results of a
random small graph unchanged (fp32 tolerance) and the graph valid. The graphs are DAGs of
elementwise, binary, reshape, transpose, cast and conv + batch_norm nodes, with constant inputs
(some neutral: ones and zeros), constant subgraphs, duplicated nodes and dead nodes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_check import check_same

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.pipeline import FP32_PASSES, PASSES, run_pipeline

RTOL = ATOL = 1e-4  # batch-norm folding reassociates
UNARY = ("relu", "tanh", "neg", "identity", "sigmoid")
BINARY = ("add", "mul", "sub")
STEPS = ("unary", "binary", "binary_const", "const_subgraph", "reshape", "transpose", "cast", "conv_bn",
         "duplicate")


@st.composite
def graphs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = Graph()
    pool = [g.add_input("x", TensorType((2, 4, 3, 3)))]

    def const(shape, kind="random"):
        data = {"random": lambda: rng.uniform(-1, 1, shape), "ones": lambda: np.ones(shape),
                "zeros": lambda: np.zeros(shape)}[kind]()
        return g.add_constant(data.astype("float32"), "c")

    for _ in range(draw(st.integers(1, 8))):
        x = draw(st.sampled_from(pool))
        shape = x.shape
        match draw(st.sampled_from(STEPS)):
            case "unary":
                y, = add_op(g, draw(st.sampled_from(UNARY)), [x])
            case "binary":
                same = [v for v in pool if v.shape == shape]
                y, = add_op(g, draw(st.sampled_from(BINARY)), [x, draw(st.sampled_from(same))])
            case "binary_const":
                c = const(draw(st.sampled_from([shape, shape[-1:], ()])),
                          draw(st.sampled_from(["random", "ones", "zeros"])))
                y, = add_op(g, draw(st.sampled_from(BINARY)), draw(st.permutations([x, c])))
            case "const_subgraph":
                c, = add_op(g, draw(st.sampled_from(BINARY)), [const(shape[-1:]), const(shape[-1:])])
                c, = add_op(g, "transpose", [add_op(g, "reshape", [c], {"shape": (1, shape[-1])})[0]],
                            {"perm": (1, 0)})
                c, = add_op(g, "reshape", [c], {"shape": shape[-1:]})
                y, = add_op(g, "mul", [x, c])
            case "reshape":
                n = int(np.prod(shape))
                target = draw(st.sampled_from([(n,), shape[::-1], (shape[0], n // shape[0]), shape]))
                y, = add_op(g, "reshape", [x], {"shape": target})
            case "transpose":
                y, = add_op(g, "transpose", [x], {"perm": tuple(draw(st.permutations(range(len(shape)))))})
            case "cast":
                y, = add_op(g, "cast", [x], {"dtype": "float64"})
                y, = add_op(g, "cast", [y], {"dtype": "float32"})
            case "conv_bn" if len(shape) == 4:
                out_c, k = draw(st.sampled_from([2, 4])), draw(st.sampled_from([1, 3]))
                y, = add_op(g, "conv2d", [x, const((out_c, shape[1], k, k))], {"padding": (k // 2,) * 4})
                params = [const((out_c,)), g.add_constant(rng.uniform(0.5, 1.5, out_c).astype("float32"), "var"),
                          const((out_c,)), const((out_c,))]
                y, = add_op(g, "batch_norm", [y, *params])
            case "duplicate" if x.node is not None:
                y = add_op(g, x.node.op, x.node.inputs, x.node.attrs)[x.index]
            case _:
                continue
        pool.append(y)
    outputs = [pool[-1]] + draw(st.lists(st.sampled_from(pool), max_size=2))
    g.set_outputs(outputs)
    return g


@settings(max_examples=80, deadline=None)
@given(graphs(), st.lists(st.sampled_from(FP32_PASSES), max_size=8))
def test_any_passes_in_any_order_keep_results(graph, order):
    out = graph
    for name in order:
        out = PASSES[name](out)
    check_same(graph, out, rtol=RTOL, atol=ATOL)


@settings(max_examples=30, deadline=None)
@given(graphs(), st.sampled_from([1, 2, 3]))
def test_levels_keep_results(graph, level):
    check_same(graph, run_pipeline(graph, level, debug=True), rtol=RTOL, atol=ATOL)
