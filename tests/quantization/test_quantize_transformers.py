"""ember.quantize(dynamic=True) on a transformer (transformers' BertModel: one layer, hidden 64, 16
tokens) against torch's fp32: each linear layer's input quantized a row at a time (quantize_rows,
no per-tensor min and max); and the per-tensor fallback where the rows are not whole blocks of 32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import ember
from benchmarks.models.hf import LastHiddenState
from ember.quantization import error


@pytest.fixture(scope="module")
def bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                        vocab_size=1000)
    config.attn_implementation = "eager"
    model = LastHiddenState(BertModel(config)).eval()
    return model, ember.quantize(model, (torch.randint(0, 1000, (1, 16)),), dynamic=True)


def test_bert_rows_against_fp32(bert):
    model, q = bert
    ops = [n.op for n in q.graph.nodes]
    # QKV, the output projection and the 2 MLP products
    assert ops.count("qgemm") == 4 and "min" not in ops and "max" not in ops
    assert ops.count("quantize_rows") == 4
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 1000, (1, 16)).astype(np.int64)
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)).numpy()
    rel, _ = error(q(ids), ref)
    print(f"one-layer BERT, dynamic int8 by rows: relative error {rel:.2e}")
    assert rel < 3e-2


def test_rows_not_whole_blocks_quantize_per_tensor():
    model = nn.Sequential(nn.Linear(40, 24), nn.ReLU(), nn.Linear(24, 16)).eval()
    x = torch.randn(6, 40)
    q = ember.quantize(model, (x,), dynamic=True)
    ops = [n.op for n in q.graph.nodes]
    assert "quantize_rows" not in ops and ops.count("qgemm") == 2 and "min" in ops
    x = torch.randn(6, 40)
    with torch.no_grad():
        ref = model(x).numpy()
    rel, _ = error(q(x.numpy()), ref)
    assert rel < 3e-2
