"""ONNX operators outside the default domain and the last default-domain stragglers, each a
one-node model compiled with ember.compile and checked against onnx's ReferenceEvaluator on
fresh random inputs: ai.onnx.preview FlexAttention (plain and grouped-query through the fused
attention, score_mod / prob_mod subgraphs inline over the unfused form); ai.onnx.ml Binarizer,
ArrayFeatureExtractor and TreeEnsemble (random ensembles over every node mode, each aggregate);
TfIdfVectorizer over integer tokens (each mode, skips, n-gram lengths)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.node.flexattention import (
    _make_prob_mod_scale_graph,
    _make_score_mod_causal_mask_graph,
    _make_score_mod_relative_positional_graph,
    _make_score_mod_soft_cap_graph,
)
from onnx.reference import ReferenceEvaluator

import ember
from ember.testing import assert_close

RNG = np.random.default_rng()


def model_of(node: onnx.NodeProto, inputs: list[np.ndarray], opsets: dict[str, int],
             output: np.ndarray | None = None) -> onnx.ModelProto:
    """A model of one node whose inputs x0, x1, ... are graph inputs of these arrays' types; its
    output typed by ONNX's inference, or as `output` where ONNX infers no shape."""
    graph_inputs = [helper.make_tensor_value_info(f"x{k}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for k, x in enumerate(inputs)]
    out_type = (TensorProto.UNDEFINED, None) if output is None else \
        (helper.np_dtype_to_tensor_dtype(output.dtype), output.shape)
    outs = [helper.make_tensor_value_info(o, *out_type) for o in node.output]
    graph = helper.make_graph([node], node.op_type.lower(), graph_inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    return onnx.shape_inference.infer_shapes(model)


def check_compiled(model: onnx.ModelProto, inputs: list[np.ndarray], rtol: float, atol: float) -> None:
    expected = ReferenceEvaluator(model).run(None, {f"x{k}": x for k, x in enumerate(inputs)})
    actual = ember.compile(model)(*inputs)
    actual = actual if isinstance(actual, (list, tuple)) else [actual]
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"output {k}: {a.dtype}{a.shape} != {e.dtype}{e.shape}"
        assert_close(a, e, rtol, atol, f"output {k} vs onnx's ReferenceEvaluator")


def test_domains_are_looked_up_apart():
    """An operator is converted by the converter of its own domain: Relu of another domain is
    unsupported; Binarizer is ai.onnx.ml's alone."""
    from ember.frontend.onnx import import_onnx
    from ember.frontend.onnx.registry import lookup
    from ember.ops import UnsupportedOpError

    assert lookup("Binarizer", 1) is None and lookup("Binarizer", 1, "ai.onnx.ml") is not None
    assert lookup("Relu", 14, "ai.onnx") is lookup("Relu", 14) is not None
    x = RNG.normal(size=(2, 3)).astype("float32")
    node = helper.make_node("Relu", ["x0"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError, match="com.example.Relu"):
        import_onnx(model)


# -- FlexAttention ---------------------------------------------------------------------------------

PREVIEW = {"": 26, "ai.onnx.preview": 1}


def flex(q, k, v, **attrs) -> onnx.ModelProto:
    node = helper.make_node("FlexAttention", ["x0", "x1", "x2"], ["y"], domain="ai.onnx.preview", **attrs)
    return model_of(node, [q, k, v], PREVIEW)


@pytest.mark.parametrize("dtype, heads", [("float32", (4, 4)), ("float32", (6, 2)), ("float16", (4, 2))])
def test_flex_attention_fused(dtype, heads):
    q = RNG.uniform(-1, 1, (2, heads[0], 5, 8)).astype(dtype)
    k = RNG.uniform(-1, 1, (2, heads[1], 7, 8)).astype(dtype)
    v = RNG.uniform(-1, 1, (2, heads[1], 7, 12)).astype(dtype)
    rtol = 2e-3 if dtype == "float16" else 1e-5
    check_compiled(flex(q, k, v, scale=0.3 if heads[0] == 6 else None), [q, k, v], rtol, rtol)


def _head_bias_graph(bias: np.ndarray) -> onnx.GraphProto:
    """score_mod: scores + a constant bias per head, query and key."""
    return helper.make_graph([helper.make_node("Add", ["bias", "scores"], ["out"])], "head_bias",
                             [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", "H", "L", "S"])],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "H", "L", "S"])],
                             [onnx.numpy_helper.from_array(bias, "bias")])


@pytest.mark.parametrize("mods, fused", [("causal", True), ("relative", True), ("head_bias", True),
                                         ("causal+prob", False), ("soft_cap", False)])
def test_flex_attention_subgraphs(mods, fused):
    """A score_mod that adds a constant bias or masks with a constant condition becomes the fused
    attention's mask; any other, or a prob_mod, is imported inline over the unfused attention."""
    from ember.frontend.onnx import import_onnx

    q = RNG.uniform(-1, 1, (1, 4, 6, 8)).astype("float32")
    k = RNG.uniform(-1, 1, (1, 2, 7, 8)).astype("float32")
    v = RNG.uniform(-1, 1, (1, 2, 7, 4)).astype("float32")
    score_mod = {"causal": _make_score_mod_causal_mask_graph(),
                 "causal+prob": _make_score_mod_causal_mask_graph(),
                 "soft_cap": _make_score_mod_soft_cap_graph(RNG.uniform(0.5, 2.0)),
                 "relative": _make_score_mod_relative_positional_graph(),
                 "head_bias": _head_bias_graph(RNG.normal(size=(4, 6, 7)).astype("float32"))}[mods]
    attrs = {"score_mod": score_mod}
    if mods == "causal+prob":
        attrs["prob_mod"] = _make_prob_mod_scale_graph(RNG.uniform(0.5, 2.0))
    model = flex(q, k, v, **attrs)
    ops = import_onnx(model).op_histogram()
    assert ("scaled_dot_product_attention" in ops) == fused and ("softmax" in ops) != fused, ops
    check_compiled(model, [q, k, v], 1e-5, 1e-5)


# -- ai.onnx.ml ------------------------------------------------------------------------------------

ML = {"": 21, "ai.onnx.ml": 5}


def test_binarizer():
    x = RNG.normal(size=(3, 4, 5)).astype("float32")
    threshold = float(RNG.uniform(-0.5, 0.5))
    x[0, 0, :2] = threshold  # equal to the threshold: not above it
    node = helper.make_node("Binarizer", ["x0"], ["y"], domain="ai.onnx.ml", threshold=threshold)
    check_compiled(model_of(node, [x], ML), [x], 0, 0)


@pytest.mark.parametrize("shape, index_shape", [((3, 4), (2,)), ((2, 3, 5), (1, 3)), ((6,), (2, 2))])
def test_array_feature_extractor(shape, index_shape):
    x = RNG.normal(size=shape).astype("float32")
    indices = RNG.integers(0, shape[-1], index_shape).astype("int64")
    node = helper.make_node("ArrayFeatureExtractor", ["x0", "x1"], ["y"], domain="ai.onnx.ml")
    expected = x[..., indices.ravel()].reshape(*(shape[:-1] or (1,)), indices.size)
    check_compiled(model_of(node, [x, indices], ML, expected), [x, indices], 0, 0)


def random_ensemble(trees: int, features: int, targets: int, depth: int) -> dict:
    """TreeEnsemble attributes of random trees over every node mode; splits and set members are
    small integers, so that EQ, NEQ and MEMBER nodes match some of the rows."""
    nodes = {k: [] for k in ("modes", "featureids", "splits", "truenodeids", "trueleafs", "falsenodeids",
                             "falseleafs", "missing")}
    leaves, members, roots = {"targetids": [], "weights": []}, [], []

    def leaf() -> int:
        leaves["targetids"].append(int(RNG.integers(0, targets)))
        leaves["weights"].append(float(RNG.uniform(-5, 5)))
        return len(leaves["weights"]) - 1

    def node(level: int) -> int:
        k = len(nodes["modes"])
        mode = int(RNG.integers(0, 7))
        for name, v in (("modes", mode), ("featureids", int(RNG.integers(0, features))),
                        ("splits", float(RNG.integers(0, 5))), ("missing", int(RNG.integers(0, 2)))):
            nodes[name].append(v)
        if mode == 6:
            # (no member 0: ONNX's reference reads a 0 as the end of its set)
            members.extend([*(1 + RNG.choice(4, size=int(RNG.integers(1, 4)), replace=False)).tolist(), np.nan])
        for side in ("true", "false"):
            nodes[f"{side}nodeids"].append(0)
            nodes[f"{side}leafs"].append(0)
        for side in ("true", "false"):
            is_leaf = level + 1 >= depth or RNG.random() < 0.25
            nodes[f"{side}leafs"][k] = int(is_leaf)
            nodes[f"{side}nodeids"][k] = leaf() if is_leaf else node(level + 1)
        return k

    for _ in range(trees):
        roots.append(node(0))
    return dict(
        n_targets=targets, tree_roots=roots,
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, (len(roots and nodes["modes"]),), nodes["modes"]),
        nodes_featureids=nodes["featureids"],
        nodes_splits=helper.make_tensor("s", TensorProto.DOUBLE, (len(nodes["splits"]),), nodes["splits"]),
        nodes_truenodeids=nodes["truenodeids"], nodes_trueleafs=nodes["trueleafs"],
        nodes_falsenodeids=nodes["falsenodeids"], nodes_falseleafs=nodes["falseleafs"],
        nodes_missing_value_tracks_true=nodes["missing"],
        membership_values=helper.make_tensor("v", TensorProto.FLOAT, (len(members),), members) if members else None,
        leaf_targetids=leaves["targetids"],
        leaf_weights=helper.make_tensor("w", TensorProto.DOUBLE, (len(leaves["weights"]),), leaves["weights"]))


@pytest.mark.parametrize("aggregate, dtype", [(0, "float32"), (1, "float64"), (2, "float32"), (3, "float64")])
def test_tree_ensemble(aggregate, dtype):
    x = RNG.integers(0, 5, (40, 3)).astype(dtype) + RNG.choice([0, 0.5], (40, 3)).astype(dtype)
    x[RNG.random(x.shape) < 0.1] = np.nan  # missing values: nodes_missing_value_tracks_true
    attrs = random_ensemble(trees=5, features=3, targets=3, depth=5)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    node = helper.make_node("TreeEnsemble", ["x0"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate, **attrs)
    check_compiled(model_of(node, [x], ML, np.zeros((40, 3), dtype)), [x], 1e-6, 1e-6)


# -- TfIdfVectorizer -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, shape, dtype, grams, skips, weighted", [
    ("TF", (3, 12), "int32", (1, 3), 2, False),
    ("IDF", (15,), "int64", (2, 3), 1, True),
    ("TFIDF", (2, 9), "int64", (1, 2), 0, True),
    ("TFIDF", (4, 7), "int32", (2, 2), 3, True),
])  # (ONNX's reference takes no IDF or TFIDF without weights)
def test_tfidf_vectorizer(mode, shape, dtype, grams, skips, weighted):
    tokens = 4  # few distinct tokens, so that the pool's n-grams occur
    x = RNG.integers(0, tokens, shape).astype(dtype)
    pool, counts = [], []
    for n in (1, 2, 3):  # distinct n-grams of each length, in a random order
        counts.append(len(pool))
        every = np.stack(np.meshgrid(*[np.arange(tokens)] * n, indexing="ij"), -1).reshape(-1, n)
        pool.extend(every[RNG.choice(len(every), size=min(5, len(every)), replace=False)].ravel().tolist())
    total = sum(min(5, tokens ** n) for n in (1, 2, 3))
    indexes = RNG.choice(total + 2, size=total, replace=False)  # some output positions no n-gram takes
    attrs = dict(mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skips,
                 ngram_counts=counts, ngram_indexes=indexes.tolist(), pool_int64s=pool)
    if weighted:
        attrs["weights"] = RNG.uniform(0.5, 2.0, indexes.max() + 1).astype("float32").tolist()  # per output
    node = helper.make_node("TfIdfVectorizer", ["x0"], ["y"], **attrs)
    check_compiled(model_of(node, [x], {"": 21}), [x], 1e-6, 1e-6)


def test_tfidf_vectorizer_without_weights():
    """IDF without weights is whether the n-gram occurs, TFIDF its count (ONNX's reference evaluator
    fails on these, so they are checked against TF and NumPy: compiled, in one model)."""
    x = RNG.integers(0, 3, (3, 10)).astype("int64")
    pool = [0, 1, 2, 0, 1, 1, 2, 2, 0]  # unigrams 0 1 2, bigrams (0 1) (1 2) (2 0)
    attrs = dict(min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3],
                 ngram_indexes=[5, 0, 3, 1, 2, 4], pool_int64s=pool)
    modes = ("TF", "IDF", "TFIDF")
    nodes = [helper.make_node("TfIdfVectorizer", ["x0"], [m], mode=m, **attrs) for m in modes]
    graph = helper.make_graph(nodes, "tfidf", [helper.make_tensor_value_info("x0", TensorProto.INT64, x.shape)],
                              [helper.make_tensor_value_info(m, TensorProto.FLOAT, (3, 6)) for m in modes])
    tf, idf, tfidf = ember.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))(x)
    expected = np.zeros((3, 6), "float32")
    for r, row in enumerate(x.tolist()):
        for s, token in enumerate(row):
            expected[r, [5, 0, 3][token]] += 1
            for d in (1, 2):  # bigrams with their tokens 1 and 2 apart
                if s + d < len(row) and (token, row[s + d]) in ((0, 1), (1, 2), (2, 0)):
                    expected[r, [1, 2, 4][[(0, 1), (1, 2), (2, 0)].index((token, row[s + d]))]] += 1
    np.testing.assert_array_equal(tf, expected)
    np.testing.assert_array_equal(idf, (expected > 0).astype("float32"))
    np.testing.assert_array_equal(tfidf, expected)


def test_tree_ensemble_deep():
    """Deep trees: each level of the walk is its own kernel (inlined into each other, the levels
    recomputed the positions exponentially: minutes to compile)."""
    import time

    x = RNG.integers(0, 5, (30, 4)).astype("float32")
    attrs = {k: v for k, v in random_ensemble(trees=4, features=4, targets=2, depth=8).items() if v is not None}
    modes = onnx.numpy_helper.to_array(attrs.pop("nodes_modes"))  # all BRANCH_LEQ, as most exporters write
    attrs["nodes_modes"] = helper.make_tensor("m", TensorProto.UINT8, modes.shape, [0] * modes.size)
    attrs.pop("membership_values", None)
    node = helper.make_node("TreeEnsemble", ["x0"], ["y"], domain="ai.onnx.ml", aggregate_function=1, **attrs)
    start = time.perf_counter()
    check_compiled(model_of(node, [x], ML, np.zeros((30, 2), "float32")), [x], 1e-5, 1e-5)
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("op", ["TreeEnsemble", "TfIdfVectorizer"])
def test_symbolic_batch(op):
    """A batch of rows of a symbolic size: one compiled model for every batch."""
    if op == "TreeEnsemble":
        attrs = {k: v for k, v in random_ensemble(trees=3, features=3, targets=2, depth=4).items() if v is not None}
        node = helper.make_node(op, ["x0"], ["y"], domain="ai.onnx.ml", aggregate_function=1, **attrs)
        x_type, y_type, opsets = (TensorProto.FLOAT, ["N", 3]), ["N", 2], ML
    else:
        node = helper.make_node(op, ["x0"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1,
                                ngram_counts=[0, 2], ngram_indexes=[2, 0, 1], pool_int64s=[1, 2, 1, 2])
        x_type, y_type, opsets = (TensorProto.INT64, ["N", 6]), ["N", 3], {"": 21}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x0", *x_type)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_type)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    compiled = ember.compile(model)
    for rows in (1, 7):
        x = RNG.integers(0, 4, (rows, x_type[1][1])).astype(onnx.helper.tensor_dtype_to_np_dtype(x_type[0]))
        expected = ReferenceEvaluator(model).run(None, {"x0": x})[0]
        assert_close(compiled(x), expected, 1e-6, 1e-6, f"{rows} rows vs onnx's ReferenceEvaluator")
