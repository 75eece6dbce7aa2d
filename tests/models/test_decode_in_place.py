"""LLaMA decode with the cache in place (benchmarks/models/decode.py's RowStep, the reduced
config: 4 heads over 2 key/value heads; its rotary queries transposed to the cache's layout by
fold_transposes; GPT-2's step takes the same path, which benchmarks/decode.py checks against
torch's tokens): the step compiled once (the past length a symbol; the prompt's rows from torch),
its attentions reading the caller's cache buffer (appended: nothing else reads the cache) with
the key/value heads grouped (gqa: not repeated), and the greedy tokens of generate_in_place
identical to torch's eager loop over the growing cache; with an int8 cache too, the step's rows
returned as int8 rows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.decode import RowStep, generate_in_place, heads, llama_lm, torch_generate  # noqa: E402
from ember.ops.attention import SDPA  # noqa: E402

PROMPT, TOKENS = 5, 12


@pytest.mark.parametrize("sizes", [{}, {"hidden_size": 256, "intermediate_size": 512}])
@torch.no_grad()
def test_in_place_greedy_tokens_as_torch(sizes):
    """The reduced model, and one whose weights are wide enough for the GEMVs' panels."""
    import ember

    model = llama_lm(small=True, **sizes)
    layers, n, dim = heads(model)
    kv = [torch.zeros((1, PROMPT, n, dim)) for _ in range(2 * layers)]
    past = torch.export.Dim("past", min=1, max=PROMPT + TOKENS)
    step = ember.compile(RowStep(model).eval(), (torch.zeros((1, 1), dtype=torch.int64), *kv),
                         dynamic_shapes=(None, tuple({1: past} for _ in kv)))
    attentions = [n for n in step.graph.nodes if n.op == SDPA]
    assert len(attentions) == layers and all(n.attrs["appended"] and n.attrs["gqa"] for n in attentions)
    caches = {v.name for v in step.graph.inputs[1:]}  # read by the attentions alone (and its length): no copy
    assert {n.op for n in step.graph.nodes if caches & {v.name for v in n.inputs}} <= {SDPA, "size"}
    if sizes:  # every product a GEMV over panels
        assert all(n.attrs["b_panels"] for n in step.graph.nodes if n.op == "gemm")
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    prefill = lambda ids: [t.numpy() for t in RowStep(model)(torch.from_numpy(ids))]  # noqa: E731 (eager)
    assert generate_in_place(prefill, step, prompt.numpy(), TOKENS, PROMPT + TOKENS + 1) == \
        torch_generate(model, prompt, TOKENS)



@torch.no_grad()
def test_int8_cache_step_returns_int8_rows_near_torch_logits():
    """kv_cache="int8": the step returns its own rows as the cache's int8 rows, which
    generate_in_place writes as they are (the prefill's quantized once); fed torch's greedy tokens,
    each step's logits are torch's on the same context within the rows' rounding (max |row| / 254:
    ||delta|| / ||torch's|| 0.02 on average and 0.045 at most measured on this model, whose wide
    weights amplify it and flip a greedy token on it)."""
    import ember

    model = llama_lm(small=True)
    layers, n, dim = heads(model)
    kv = [torch.zeros((1, PROMPT, n, dim)) for _ in range(2 * layers)]
    past = torch.export.Dim("past", min=1, max=PROMPT + TOKENS)
    step = ember.compile(RowStep(model).eval(), (torch.zeros((1, 1), dtype=torch.int64), *kv),
                         dynamic_shapes=(None, tuple({1: past} for _ in kv)), kv_cache="int8")
    assert [(t.dtype, t.shape) for t in step.spec.outputs[1:]] == [("int8", (1, 1, n, dim + 4))] * (2 * layers)
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    tokens = torch_generate(model, prompt, TOKENS)
    prefill = lambda ids: [t.numpy() for t in RowStep(model)(torch.from_numpy(ids))]  # noqa: E731 (eager)
    logits: list = []
    generate_in_place(prefill, step, prompt.numpy(), TOKENS, PROMPT + TOKENS + 1, feed=tokens, logits_out=logits)
    want = model(torch.cat([prompt, torch.tensor([tokens[:-1]])], 1)).logits[0, PROMPT - 1:].numpy()
    errors = [np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(logits[1:], want[1:])]
    assert np.mean(errors) < 0.04 and max(errors) < 0.1
