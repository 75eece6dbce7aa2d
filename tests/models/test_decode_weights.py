"""Weight-only int8 and int4 GPT-2 decode (benchmarks/models/decode.py, the reduced config): the
step compiled once with weights="int8" and "int4" (the past length a symbol), its logits'
relative error against torch's float32 step at two cache lengths, and the cache it returns as
torch's (the attention is float32)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.decode import Step, cache_shape, gpt2_lm  # noqa: E402

MAX_LEN = 32
# ||logits - float32 logits|| / ||float32 logits||: about 0.015 (int8) and 0.17 to 0.26 (int4, group 32) measured
ERROR = {"int8": 0.03, "int4": 0.4}


@pytest.fixture(scope="module")
def model():
    return gpt2_lm(small=True)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_step_logits_against_float32(model, weights):
    import ember

    kv = [torch.zeros(cache_shape(model, 4)) for _ in range(2 * model.config.n_layer)]
    past = torch.export.Dim("past", min=1, max=MAX_LEN - 1)
    ids = torch.zeros((1, 1), dtype=torch.int64)
    step = ember.compile(Step(model).eval(), (ids, *kv), dynamic_shapes=(None, tuple({2: past} for _ in kv)),
                         weights=weights, group_size=32 if weights == "int4" else None)
    for length in (1, MAX_LEN - 1):
        ids = torch.randint(0, model.config.vocab_size, (1, 1))
        kv = [torch.randn(cache_shape(model, length)) for _ in range(2 * model.config.n_layer)]
        logits, *cache = step(ids, *kv)
        with torch.no_grad():
            want, *want_cache = Step(model)(ids, *kv)
        error = np.linalg.norm(logits.numpy() - want.numpy()) / np.linalg.norm(want.numpy())
        assert error < ERROR[weights], f"{weights} at past {length}: {error:.4f}"
        assert error > 0  # the weights were quantized
        np.testing.assert_allclose(cache[0].numpy()[:, :, :length], kv[0].numpy())
