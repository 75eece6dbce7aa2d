"""GPT-2 greedy decode with a KV cache (benchmarks/models/decode.py, the reduced config): the
prefill and the step, each compiled once (the past length a symbol, the cache explicit tensors in
and out), give torch's greedy tokens for 32 steps, and the step's logits and cache match torch's
at every length tried, its attentions reading no mask (torch's of every key dropped)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.decode import (  # noqa: E402
    Step,
    cache_shape,
    compile_decode,
    ember_generate,
    gpt2_lm,
    hf_generate,
    torch_generate,
)
from ember.ops.attention import SDPA  # noqa: E402

PROMPT, MAX_LEN = 8, 64


@pytest.fixture(scope="module")
def decoder():
    model = gpt2_lm(small=True)
    prefill, step = compile_decode(model, PROMPT, MAX_LEN)
    return model, prefill, step


def test_greedy_tokens_match_torch(decoder):
    model, prefill, step = decoder
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT))
    tokens = ember_generate(prefill, step, prompt.numpy(), 32)
    assert tokens == torch_generate(model, prompt, 32)
    assert tokens == hf_generate(model, prompt, 32)
    assert len(set(tokens)) > 4  # the weights are wide enough that greedy decoding does not repeat one token


def test_the_step_matches_torch_at_every_length(decoder):
    model, _, step = decoder
    assert step.spec.ranges == {"past": (1, MAX_LEN - 1)}
    # torch's trace passes every attention arange(past + 1) <= past + arange(1), every key: dropped
    attentions = [n for n in step.graph.nodes if n.op == SDPA]
    assert len(attentions) == model.config.n_layer
    assert all(len(n.inputs) == (5 if n.attrs["appended"] else 3) for n in attentions)
    assert [t.shape[2] for t in step.spec.outputs[1:]] == ["past + 1"] * 2 * model.config.n_layer
    for past in (1, 9, MAX_LEN - 1):
        ids = torch.randint(0, model.config.vocab_size, (1, 1))
        kv = [torch.randn(cache_shape(model, past)) for _ in range(2 * model.config.n_layer)]
        got = step(ids, *kv)
        with torch.no_grad():
            want = Step(model)(ids, *kv)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=2e-5, err_msg=f"past {past}")
