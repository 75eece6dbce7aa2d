"""Operators of the ai.onnx.ml domain, written with ember's operators at import.

- Binarizer: `where(x > threshold, 1, 0)`.
- ArrayFeatureExtractor: `gather` of the flattened indices along the last axis (a vector's
  result is one row, as onnxruntime gives it).
- TreeEnsemble (5): every tree is walked for every row at once, in lock step: the node each
  (row, tree) is at is an int64 index into one table of the nodes and, after them, the leaves
  (a leaf leads to itself), and each step `gather`s the node's feature, split, mode and
  children, compares the feature's value (`gather_elements` of the row) with the split in
  float64 (LEQ/LT/GTE/GT/EQ/NEQ, MEMBER as an `equal` against the node's padded set, a NaN
  going the true way where nodes_missing_value_tracks_true says), and `where` picks the child;
  as many steps as the deepest tree is deep (read from the arrays at import), each one kernel
  (it ends in a reduction over an axis of size 1, which fusion does not inline into the next). The leaves' weights
  then go to their targets (a one-hot of the target ids) and are aggregated over the trees
  (`sum`, its mean, `min`, `max`; a target no leaf reaches keeps 0, or the dtype's largest or
  smallest value for MIN and MAX, as ONNX's reference). post_transform NONE only.
  1000 rows through 100 trees of depth 6 (one thread, a busy machine): about 8 ms compiled,
  onnxruntime's TreeEnsemble 2 to 3 ms; a kernel that walks each tree per row would close that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..node import NodeContext
from ..registry import converts

ML = "ai.onnx.ml"
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)


@converts("Binarizer", domain=ML)
def _binarizer(cx: NodeContext):
    x = cx.input(0)
    above = cx.op("greater", [x, cx.scalar(cx.attr("threshold", 0.0), x)])
    return [cx.op("where", [above, cx.scalar(1, x), cx.scalar(0, x)])]


@converts("ArrayFeatureExtractor", domain=ML)
def _array_feature_extractor(cx: NodeContext):
    x, indices = cx.input(0), cx.input(1)
    shape = cx.type(x).shape
    count = math.prod(cx.static_shape(indices, "Y"))
    index = cx.op("reshape", [indices], {"shape": (count,)}) if cx.type(indices).rank != 1 else indices
    y = cx.op("gather", [x, index], {"axis": len(shape) - 1})
    return [cx.op("reshape", [y], {"shape": (1, count)}) if len(shape) == 1 else y]


@converts("TreeEnsemble", domain=ML)
def _tree_ensemble(cx: NodeContext):
    if cx.attr("post_transform", 0):
        raise cx.unsupported(f"post_transform {cx.attr('post_transform')}")
    x = cx.input(0)
    if cx.type(x).rank != 2:
        raise cx.error(f"X must be (rows, features), got {cx.type(x).shape}")
    t = _table(cx)
    aggregate = cx.attr("aggregate_function", SUM)
    if aggregate not in (AVERAGE, SUM, MIN, MAX):
        raise cx.error(f"aggregate_function {aggregate} is not one of 0 (AVERAGE), 1 (SUM), 2 (MIN), 3 (MAX)")

    rows = cx.type(x).shape[0]
    xd = cx.op("cast", [x], {"dtype": "float64"})
    cur = cx.op("expand", [t.roots.reshape(1, -1)], {"shape": (rows, len(t.roots))})  # (rows, trees)
    for _ in range(t.depth):
        value = cx.op("gather_elements", [xd, cx.op("gather", [t.feature, cur], {"axis": 0})], {"axis": 1})
        split = cx.op("gather", [t.split, cur], {"axis": 0})
        mode = cx.op("gather", [t.mode, cur], {"axis": 0})
        go_true = _compare(cx, t, value, split, mode, cur)
        cur = cx.op("where", [go_true, cx.op("gather", [t.true_next, cur], {"axis": 0}),
                              cx.op("gather", [t.false_next, cur], {"axis": 0})])
        # a reduction over a new axis of size 1: fusion never inlines a reduction into its users,
        # so each step is one kernel that writes the positions, rather than the steps inlined into
        # each other, each recomputing the previous one's positions once per read of them
        cur = cx.op("sum", [cx.op("unsqueeze", [cur], {"axes": (2,)})], {"axes": (2,), "keepdims": False})
    weight = cx.op("gather", [t.weight, cur], {"axis": 0})  # (rows, trees)
    target = cx.op("gather", [t.target, cur], {"axis": 0})
    hits = cx.op("equal", [cx.op("unsqueeze", [target], {"axes": (2,)}),
                           np.arange(cx.attr("n_targets"), dtype="int64")])  # (rows, trees, targets)
    weight = cx.op("unsqueeze", [weight], {"axes": (2,)})
    dtype = cx.type(x).dtype
    if aggregate in (SUM, AVERAGE):
        y = cx.op("sum", [cx.op("where", [hits, weight, np.float64(0)])], {"axes": (1,), "keepdims": False})
        y = y if aggregate == SUM else cx.op("div", [y, np.float64(len(t.roots))])
    else:
        info = np.finfo(dtype)
        fill = np.float64(info.max if aggregate == MIN else info.min)
        op = "min" if aggregate == MIN else "max"
        y = cx.op(op, [cx.op("where", [hits, weight, fill])], {"axes": (1,), "keepdims": False})
    return [y if dtype == "float64" else cx.op("cast", [y], {"dtype": dtype})]


def _compare(cx: NodeContext, t: _Table, value, split, mode, cur):
    """Whether each (row, tree) goes to its node's true child."""
    tests = {LEQ: "less_equal", LT: "less", GTE: "greater_equal", GT: "greater", EQ: "equal", NEQ: "not_equal"}
    go_true = None
    for m in sorted(set(t.mode.tolist())):
        if m == MEMBER:
            members = cx.op("gather", [t.members, cur], {"axis": 0})  # (rows, trees, most members)
            hit = cx.op("equal", [cx.op("unsqueeze", [value], {"axes": (2,)}), members])
            test = cx.op("greater", [cx.op("sum", [cx.op("cast", [hit], {"dtype": "int32"})],
                                            {"axes": (2,), "keepdims": False}), np.int32(0)])
        else:
            test = cx.op(tests[m], [value, split])
        go_true = test if go_true is None else \
            cx.op("where", [cx.op("equal", [mode, np.uint8(m)]), test, go_true])
    if t.missing_true.any():
        missing = cx.op("logical_and", [cx.op("not_equal", [value, value]),
                                        cx.op("gather", [t.missing_true, cur], {"axis": 0})])
        go_true = cx.op("logical_or", [go_true, missing])
    return go_true


@dataclass(frozen=True)
class _Table:
    """The nodes, then the leaves, of every tree as arrays indexed by one position; a leaf's
    children are itself (its mode LEQ against a NaN split: it goes to itself either way)."""

    roots: np.ndarray  # (trees,) where each tree's walk starts
    feature: np.ndarray
    split: np.ndarray  # float64
    mode: np.ndarray  # uint8
    true_next: np.ndarray
    false_next: np.ndarray
    missing_true: np.ndarray  # bool: a NaN value goes the true way
    members: np.ndarray  # (positions, most members) float64, NaN-padded: a MEMBER node's set
    weight: np.ndarray  # float64, a leaf's
    target: np.ndarray  # int64, a leaf's
    depth: int  # the most comparisons from a root to a leaf


def _table(cx: NodeContext) -> _Table:
    ints = {name: np.asarray(cx.attr(name), dtype="int64") for name in (
        "nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids", "tree_roots", "leaf_targetids")}
    true_leaf = np.asarray(cx.attr("nodes_trueleafs"), dtype=bool)
    false_leaf = np.asarray(cx.attr("nodes_falseleafs"), dtype=bool)
    modes = np.asarray(cx.attr("nodes_modes"), dtype="uint8")
    n, leaves = len(modes), len(ints["leaf_targetids"])
    true_next = np.where(true_leaf, ints["nodes_truenodeids"] + n, ints["nodes_truenodeids"])
    false_next = np.where(false_leaf, ints["nodes_falsenodeids"] + n, ints["nodes_falsenodeids"])
    at_leaf = np.arange(n, n + leaves)
    tracks = cx.attr("nodes_missing_value_tracks_true")
    tracks = np.zeros(n, bool) if tracks is None else np.asarray(tracks, bool)
    roots = ints["tree_roots"]
    # a tree that is one leaf: its root's children are that leaf both ways
    single = true_leaf[roots] & false_leaf[roots] & (ints["nodes_truenodeids"][roots]
                                                      == ints["nodes_falsenodeids"][roots])
    roots = np.where(single, true_next[roots], roots)
    # the members of each MEMBER node's set: membership_values holds the sets in node order, each ended by a NaN
    values = cx.attr("membership_values")
    values = np.asarray([] if values is None else values, "float64")
    ends, member_nodes = np.flatnonzero(np.isnan(values)), np.flatnonzero(modes == MEMBER)
    if len(ends) != len(member_nodes):
        raise cx.error(f"membership_values has {len(ends)} NaN-ended sets for {len(member_nodes)} MEMBER nodes")
    sets = np.split(values, ends + 1)[:len(ends)]
    members = np.full((n + leaves, max((len(m) - 1 for m in sets), default=1) or 1), np.nan)
    for node, m in zip(member_nodes, sets):
        members[node, :len(m) - 1] = m[:-1]
    return _Table(
        roots=roots,
        feature=np.concatenate([ints["nodes_featureids"], np.zeros(leaves, "int64")]),
        split=np.concatenate([np.asarray(cx.attr("nodes_splits"), "float64"), np.full(leaves, np.nan)]),
        mode=np.concatenate([modes, np.zeros(leaves, "uint8")]),
        true_next=np.concatenate([true_next, at_leaf]),
        false_next=np.concatenate([false_next, at_leaf]),
        missing_true=np.concatenate([tracks, np.zeros(leaves, bool)]),
        members=members,
        weight=np.concatenate([np.zeros(n), np.asarray(cx.attr("leaf_weights"), "float64")]),
        target=np.concatenate([np.zeros(n, "int64"), ints["leaf_targetids"]]),
        depth=max((_depth(cx, r, true_next, false_next, n) for r in roots), default=0))


def _depth(cx: NodeContext, node: int, true_next: np.ndarray, false_next: np.ndarray, n: int) -> int:
    """The most comparisons on a path from `node` to a leaf (positions n and on are leaves)."""
    depth, frontier = 0, {node}
    while frontier := {c for f in frontier if f < n for c in (true_next[f], false_next[f])}:
        depth += 1
        if depth > n:
            raise cx.error(f"the tree at node {node} has a cycle")
    return depth
