"""scaled_dot_product_attention (ember/ops/attention.py) against its NumPy reference and
torch.nn.functional.scaled_dot_product_attention on the C target: the default and a given scale,
causal masking, bool and float masks that broadcast, broadcast batch dimensions, a symbolic batch,
a row with every key masked (0, as in PyTorch), tiny cases on the interpreter, and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.attention import SDPA
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()
TOL = {"rtol": 1e-5, "atol": 1e-6}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def test_attention_against_torch():
    q, k, v = rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 16)
    check_op(SDPA, [q, k, v], None, **TOL, torch_fn=F.scaled_dot_product_attention)
    check_op(SDPA, [q, k, v], {"causal": True, "scale": 0.3}, **TOL,
             torch_fn=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3))


def test_attention_masks_against_torch():
    q, k, v = rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 16)
    keep = RNG.random((5, 7)) < 0.7
    keep[:, 0] = True
    float_mask = rand(3, 1, 7)
    for mask in (keep, float_mask):
        check_op(SDPA, [q, k, v, mask], None, **TOL,
                 torch_fn=lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))


def test_attention_broadcasts_batches_and_masks_whole_rows_to_zero():
    q, k, v = rand(2, 1, 4, 8), rand(3, 6, 8), rand(3, 6, 8)
    keep = np.ones((4, 6), bool)
    keep[1] = False
    (out,) = check_op(SDPA, [q, k, v, keep], None, **TOL, torch_fn=F.scaled_dot_product_attention)
    assert (out[:, :, 1] == 0).all() and not np.isnan(out).any()


def test_attention_2d_and_symbolic_batch():
    check_op(SDPA, [rand(4, 8), rand(6, 8), rand(6, 3)], None, **TOL, torch_fn=F.scaled_dot_product_attention)
    types = [TensorType(("batch", 4, 8)), TensorType(("batch", 6, 8)), TensorType(("batch", 6, 16))]
    check_op_sizes(SDPA, types, {"causal": True},
                   [[rand(n, 4, 8), rand(n, 6, 8), rand(n, 6, 16)] for n in (1, 3)], **TOL,
                   torch_fn=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_tiny_attention_on_the_interpreter():
    check_op(SDPA, [rand(1, 3, 4), rand(1, 5, 4), rand(1, 5, 2), RNG.random((3, 5)) < 2], {"causal": True},
             **TOL, targets=("c", "python"))


@pytest.mark.parametrize("shapes, mask_dtype, message", [
    ([(2, 4, 8), (2, 6, 7), (2, 6, 8)], None, "q's and k's embedding sizes differ"),
    ([(2, 4, 8), (2, 6, 8), (2, 5, 8)], None, "different sequence lengths"),
    ([(8,), (6, 8), (6, 8)], None, "rank >= 2"),
    ([(2, 4, 8), (2, 6, 8), (2, 6, 8), (4, 5)], "bool", "does not broadcast to the scores"),
    ([(2, 4, 8), (2, 6, 8), (2, 6, 8), (4, 6)], "int32", "mask must be bool or float32"),
])
def test_attention_errors(shapes, mask_dtype, message):
    types = [TensorType(s) for s in shapes[:3]] + [TensorType(s, mask_dtype) for s in shapes[3:]]
    with pytest.raises(OpTypeError) as e:
        infer_types(SDPA, types)
    assert SDPA in str(e.value) and message in str(e.value)


def bshd_torch(causal=False):
    """torch's attention on inputs with the heads after the sequence (axes -3 and -2 swapped)."""
    def fn(q, k, v, mask=None):
        out = F.scaled_dot_product_attention(*(x.transpose(-3, -2) for x in (q, k, v)), attn_mask=mask,
                                             is_causal=causal)
        return out.transpose(-3, -2)

    return fn


def test_heads_after_sequence_layout_against_torch():
    q, k, v = rand(2, 5, 3, 8), rand(2, 7, 3, 8), rand(2, 7, 3, 16)
    check_op(SDPA, [q, k, v], {"layout": "bshd"}, **TOL, torch_fn=bshd_torch())
    keep = RNG.random((3, 5, 7)) < 0.7
    keep[..., 0] = True
    check_op(SDPA, [q, k, v, keep], {"layout": "bshd"}, **TOL, torch_fn=bshd_torch())
    check_op(SDPA, [rand(4, 2, 8), rand(4, 2, 8), rand(4, 2, 4)], {"layout": "bshd", "causal": True}, **TOL,
             torch_fn=bshd_torch(causal=True))
    check_op(SDPA, [rand(1, 3, 2, 4), rand(1, 5, 2, 4), rand(1, 5, 2, 2)], {"layout": "bshd"}, **TOL,
             targets=("c", "python"))


@pytest.mark.parametrize("shapes, attrs, message", [
    ([(4, 8), (6, 8), (6, 8)], {"layout": "bshd"}, "layout bshd needs q, k, v of rank >= 3"),
    ([(2, 4, 8), (2, 6, 8), (2, 6, 8)], {"layout": "sbhd"}, "layout must be one of"),
])
def test_attention_layout_errors(shapes, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(SDPA, [TensorType(s) for s in shapes], attrs)
    assert SDPA in str(e.value) and message in str(e.value)
