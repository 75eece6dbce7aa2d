"""A decode step's key/value cache kept in fewer bytes (ember.compile(..., kv_cache="bf16" or
"int8")): the graph inputs that are a cache read in place (the k and v of attentions with
`appended` keys, ember.passes.fold_cache_append) become bfloat16 inputs, or int8 rows of codes
and a float32 scale each (ember.tir.kv_int8), which the attention reads converted to float32 in
registers (ember.codegen.c_attention_decode).

    step(ids, k0: float32[1, past, H, E], ...) -> step(ids, k0: bfloat16[1, past, H, E], ...)
                                               or step(ids, k0: int8[1, past, H, E + 4], ...)

At a long context the cache, not the weights, is most of the bytes a step reads (GPT-2 small at
1024 positions: 75 MB of float32 keys and values a token, against 124 MB of int8 weights), so
halving it is what lets weight-only quantization keep its speedup there. The caller keeps its
cache buffers in bfloat16 (ml_dtypes' type) and writes the step's own rows, still float32
outputs, into them rounded (NumPy's assignment); an int8 step returns its rows as int8 rows
(ember.ops.kv_rows), whose bytes the caller copies; the step's attention reads its own row in
float32. An input that anything else reads (but its size) is left float32, and with it the other
of its attention's keys and values, as is every attention without a cache (a prefill); int8 only
where one query reads the cache (the decode routine; the staged attention of more queries reads
no int8 rows).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..graph.core import Graph, TensorType, Value
from ..ops.attention import SDPA
from ..ops.nodes import add_op
from ..tir.kv_int8 import SCALE_BYTES
from .dce import dce
from .rewrite import Rewriter

KV_CACHES = {"float32": None, "bf16": "bfloat16", "int8": "int8"}  # the option's values: the cache's stored dtype


def check_kv_cache(kv_cache: str) -> str | None:
    """The dtype the option names (None: float32, nothing changes), or a ConfigError."""
    if kv_cache not in KV_CACHES:
        raise ConfigError(f"kv_cache must be one of {sorted(KV_CACHES)}, got {kv_cache!r}")
    return KV_CACHES[kv_cache]


def kv_cache(graph: Graph, dtype: str | None = None) -> Graph:
    if dtype is None or not any(n.op == SDPA and n.attrs["appended"] for n in graph.nodes):
        return graph  # unchanged: the same graph
    live = dce(graph)  # the concatenations that fold_cache_append left to no reader read the cache too
    caches = _caches(live, one_query=dtype == "int8")
    if not caches:
        return graph
    graph = live
    types = {v.name: _stored(v.type, dtype) for v in graph.inputs if v.name in caches}
    rw = Rewriter(graph, input_types=types)
    for node in graph.nodes:
        ins = rw.inputs(node)
        if node.op == SDPA and any(v.name in caches for v in node.inputs):
            rw.replace(node, rw.emit(SDPA, ins, node.attrs, hint=node.name, out_names=[node.outputs[0].name]))
        else:
            rw.copy(node, ins)
    graph = rw.finish()
    return _rows_out(graph) if dtype == "int8" else graph


def _rows_out(graph: Graph) -> Graph:
    """The graph with each of its outputs that is an int8-cache attention's own row (k_new or
    v_new: what the caller writes after the cache) returned as int8 rows of the cache's format
    (kv_int8_rows), so that the caller copies its bytes instead of quantizing it."""
    rows = {v.name for n in graph.nodes if n.op == SDPA and n.attrs["appended"] and n.inputs[1].type.dtype == "int8"
            for v in n.inputs[-2:]}
    quantized: dict[str, Value] = {}
    for v in graph.outputs:
        if v.name in rows and v.name not in quantized:
            (quantized[v.name],) = add_op(graph, "kv_int8_rows", [v])
    graph.set_outputs([quantized.get(v.name, v) for v in graph.outputs])
    return graph


def _stored(t: TensorType, dtype: str) -> TensorType:
    """A cache input's type in `dtype` (int8: a row's codes, then its scale's 4 bytes)."""
    if dtype != "int8":
        return TensorType(t.shape, dtype)
    return TensorType(t.shape[:-1] + (t.shape[-1] + SCALE_BYTES,), dtype)


def _decode(node) -> bool:
    """Whether an attention reads its cache with one query (the decode routine), its row size
    static."""
    q, k = (v.type.shape for v in node.inputs[:2])
    position = -3 if node.attrs["layout"] == "bshd" else -2
    return q[position] == 1 and not node.attrs["causal"] and isinstance(k[-1], int)


def _caches(graph: Graph, one_query: bool = False) -> set[str]:
    """The float32 graph inputs read only as the cache (k or v) of appended attentions (of one
    query, with `one_query`), or by `size`, each attention's k and v both."""
    inputs = {v.name for v in graph.inputs if v.type.dtype == "float32"}
    as_cache, other = set(), set()
    for node in graph.nodes:
        for slot, v in enumerate(node.inputs):
            if v.name not in inputs:
                continue
            cache = node.op == SDPA and node.attrs["appended"] and slot in (1, 2) and (_decode(node) or not one_query)
            (as_cache if cache else other if node.op != "size" else set()).add(v.name)
    caches = as_cache - other - {v.name for v in graph.outputs}
    pairs = [{v.name for v in n.inputs[1:3]} for n in graph.nodes if n.op == SDPA and n.attrs["appended"]]
    while any(0 < len(p & caches) < 2 for p in pairs):  # an attention's k and v are of one dtype
        caches -= set().union(*(p for p in pairs if 0 < len(p & caches) < 2))
    return caches
