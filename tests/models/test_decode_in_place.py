"""LLaMA decode with the cache in place (benchmarks/models/decode.py's RowStep, the reduced
config: 4 heads over 2 key/value heads; its rotary queries transposed to the cache's layout by
fold_transposes; GPT-2's step takes the same path, which benchmarks/decode.py checks against
torch's tokens): the step compiled once (the past length a symbol; the prompt's rows from torch),
its attentions reading the caller's cache buffer (appended: nothing else reads the cache) with
the key/value heads grouped (gqa: not repeated), and the greedy tokens of generate_in_place
identical to torch's eager loop over the growing cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.decode import RowStep, generate_in_place, heads, llama_lm, torch_generate  # noqa: E402
from ember.ops.attention import SDPA  # noqa: E402

PROMPT, TOKENS = 5, 12


@torch.no_grad()
def test_in_place_greedy_tokens_as_torch():
    import ember

    model = llama_lm(small=True)
    layers, n, dim = heads(model)
    kv = [torch.zeros((1, PROMPT, n, dim)) for _ in range(2 * layers)]
    past = torch.export.Dim("past", min=1, max=PROMPT + TOKENS)
    step = ember.compile(RowStep(model).eval(), (torch.zeros((1, 1), dtype=torch.int64), *kv),
                         dynamic_shapes=(None, tuple({1: past} for _ in kv)))
    attentions = [n for n in step.graph.nodes if n.op == SDPA]
    assert len(attentions) == layers and all(n.attrs["appended"] and n.attrs["gqa"] for n in attentions)
    caches = {v.name for v in step.graph.inputs[1:]}  # read by the attentions alone (and its length): no copy
    assert {n.op for n in step.graph.nodes if caches & {v.name for v in n.inputs}} <= {SDPA, "size"}
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    prefill = lambda ids: [t.numpy() for t in RowStep(model)(torch.from_numpy(ids))]  # noqa: E731 (eager)
    assert generate_in_place(prefill, step, prompt.numpy(), TOKENS, PROMPT + TOKENS + 1) == \
        torch_generate(model, prompt, TOKENS)
