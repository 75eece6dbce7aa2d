"""TfIdfVectorizer over integer tokens, written with ember's operators at import.

The output's size is static (the largest of ngram_indexes, plus one), so the counting is too:
for each n-gram length n in [min_gram_length, max_gram_length] that the pool holds and each
skip distance d (1 to max_skip_count + 1; unigrams once, at d = 1), the windows
x[s], x[s + d], ..., x[s + (n - 1) d] of every start s (strided `slice`s, stacked) are compared
with the pool's n-grams (`equal`, all of the n tokens: `min`), and the hits summed over the
starts; a `matmul` with a one-hot of ngram_indexes takes the counts to their output positions.
Then TF is the count, IDF the weight (or 1) where the count is nonzero, TFIDF the weight (or 1)
times the count. This costs rows x starts x pool n-grams comparisons: meant for the small pools
of the models that carry one, not a vocabulary of 10^5 n-grams. Strings (pool_strings) are not
tensors ember has. The rows may be of a symbolic number; their length must be static.
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext
from ..registry import converts


@converts("TfIdfVectorizer")
def _tfidf_vectorizer(cx: NodeContext):
    if cx.attr("pool_strings") is not None:
        raise cx.unsupported("pool_strings (string tokens)")
    x = cx.input(0)
    shape = cx.type(x).shape
    if len(shape) not in (1, 2) or not isinstance(shape[-1], int):
        raise cx.error(f"X must be [C] or [B, C] with C static, got {shape}")
    rows, width = (1, *shape) if len(shape) == 1 else shape
    x = cx.op("reshape", [cx.op("cast", [x], {"dtype": "int64"})], {"shape": (rows, width)})
    pool = np.asarray(cx.attr("pool_int64s"), "int64")
    starts = [*np.asarray(cx.attr("ngram_counts"), "int64").tolist(), len(pool)]
    indexes = np.asarray(cx.attr("ngram_indexes"), "int64")
    size = int(indexes.max()) + 1
    low, high, skips = cx.attr("min_gram_length"), cx.attr("max_gram_length"), cx.attr("max_skip_count")

    counts, first = [], 0  # counts: (rows, the pool's n-grams of one length), first: the first's number
    for n, (begin, end) in enumerate(zip(starts, starts[1:]), start=1):
        grams = pool[begin:end].reshape(-1, n)
        if low <= n <= high and len(grams):
            hits = [_count(cx, x, grams, d) for d in range(1, (1 if n == 1 else skips + 1) + 1)
                    if width - (n - 1) * d > 0]  # (none: no n-gram of this length fits in a row)
            for h in hits[1:]:
                hits[0] = cx.op("add", [hits[0], h])
            onehot = np.zeros((len(grams), size), "float32")
            onehot[np.arange(len(grams)), indexes[first:first + len(grams)]] = 1
            counts.extend(cx.op("matmul", [total, onehot]) for total in hits[:1])
        first += len(grams)
    y = counts[0] if counts else cx.op("expand", [np.zeros((1, size), "float32")], {"shape": (rows, size)})
    for c in counts[1:]:
        y = cx.op("add", [y, c])

    mode, weights = cx.attr("mode"), cx.attr("weights")
    weights = None if weights is None else np.asarray(weights, "float32")
    if weights is not None and weights.shape != (size,):
        raise cx.error(f"weights has {len(weights)} values for the {size} output positions")
    if mode == "IDF":
        y = cx.op("where", [cx.op("greater", [y, np.float32(0)]),
                            np.float32(1) if weights is None else weights, np.float32(0)])
    elif mode == "TFIDF" and weights is not None:
        y = cx.op("mul", [y, weights])
    elif mode not in ("TF", "TFIDF"):
        raise cx.error(f"mode {mode!r} is not one of TF, IDF, TFIDF")
    return [cx.op("reshape", [y], {"shape": (size,)}) if len(shape) == 1 else y]


def _count(cx: NodeContext, x, grams: np.ndarray, d: int):
    """How often each of `grams` (k, n) occurs in each row of x with its tokens d apart: (rows, k)
    float32."""
    rows, width = cx.type(x).shape
    k, n = grams.shape
    span = width - (n - 1) * d  # the starts
    windows = [cx.op("slice", [x], {"starts": (j * d,), "ends": (j * d + span,), "axes": (1,)}) for j in range(n)]
    windows = cx.op("concat", [cx.op("unsqueeze", [w], {"axes": (2, 3)}) for w in windows], {"axis": 3}) \
        if n > 1 else cx.op("unsqueeze", [windows[0]], {"axes": (2, 3)})  # (rows, starts, 1, n)
    same = cx.op("cast", [cx.op("equal", [windows, grams.reshape(1, 1, k, n)])], {"dtype": "float32"})
    every = cx.op("min", [same], {"axes": (3,), "keepdims": False})  # (rows, starts, k)
    return cx.op("sum", [every], {"axes": (1,), "keepdims": False})
