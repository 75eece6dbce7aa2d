"""ember.passes.unfold_attention for a GPU target: grouped key/value heads (gqa) are repeated to
the query's heads before the GPU's kernels (flash_attention, or the products and softmax), the
rewritten graph computing what the attention does (ember.ops.evaluate, rtol 1e-4, atol 1e-5);
a symbolic batch and lengths take flash_attention too; a constant mask that only says causal is
dropped for causal; the Tensor Core kernel's warps a block follow the target's multiprocessors."""

from __future__ import annotations

import numpy as np
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.graph.verify import verify
from ember.ops import infer_types
from ember.ops.nodes import add_op
from ember.passes.unfold_attention import unfold_attention
from ember.target import Target


def test_grouped_heads_are_repeated_for_the_gpu():
    g = Graph("attention")
    q = g.add_input("q", TensorType((1, 4, 8, 16)))
    k, v = (g.add_input(n, TensorType((1, 2, 8, 16))) for n in "kv")
    g.set_outputs(add_op(g, "scaled_dot_product_attention", [q, k, v], {"causal": True, "gqa": True}))
    out = unfold_attention(g, Target("cuda", simulate=True))
    assert "scaled_dot_product_attention" not in ops(out) and ops(out).count("expand") == 2
    check_same(g, out)


def test_causal_attention_over_a_symbolic_batch_and_lengths_is_the_fused_kernel():
    """(Its numerics at each length: tests/cuda/test_flash_attention.py.)"""
    g = Graph("attention")
    q = g.add_input("q", TensorType(("b", 2, "l", 16)))
    k, v = (g.add_input(n, TensorType(("b", 2, "s", 16))) for n in "kv")
    g.set_outputs(add_op(g, "scaled_dot_product_attention", [q, k, v], {"causal": True}))
    out = unfold_attention(g, Target("cuda", simulate=True))
    verify(out, infer_types)
    assert ops(out) == ["flash_attention"] and out.outputs[0].type == TensorType(("b", 2, "l", 16))


def test_a_constant_lower_triangle_mask_becomes_causal_for_the_fused_kernel():
    """GPT-2's: no mask read per score, the key tiles above the diagonal skipped."""
    g = Graph("attention")
    q, k, v = (g.add_input(n, TensorType((1, 2, 8, 16))) for n in "qkv")
    mask = g.add_constant(np.tril(np.ones((1, 1, 8, 8), bool)), "causal_mask")
    g.set_outputs(add_op(g, "scaled_dot_product_attention", [q, k, v, mask], {}))
    out = unfold_attention(g, Target("cuda", simulate=True))
    (node,) = out.nodes
    assert node.op == "flash_attention" and len(node.inputs) == 3 and node.attrs["causal"]
    check_same(g, out)


def test_the_tensor_core_kernels_warps_cover_the_targets_multiprocessors():
    """BERT-base's 12 heads of 128 tokens: 24 blocks of 4 warps on 132 multiprocessors, 96 of 1;
    a GPU of 16 keeps 4; float32 (CUDA cores) and a symbolic length leave it to the kernel."""
    from ember.target import GPU

    def warps(dtype, length, sms):
        g = Graph("attention")
        q, k, v = (g.add_input(n, TensorType((1, 12, length, 64), dtype)) for n in "qkv")
        g.set_outputs(add_op(g, "scaled_dot_product_attention", [q, k, v], {}))
        (node,) = unfold_attention(g, Target("cuda", simulate=True, gpu=GPU(multiprocessors=sms))).nodes
        return node.attrs["warps"]

    assert [warps("float16", 128, 132), warps("float16", 128, 48), warps("float16", 128, 16)] == [1, 2, 4]
    assert warps("float32", 128, 132) is None and warps("bfloat16", "l", 132) is None
