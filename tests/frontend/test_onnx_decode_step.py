"""GPT-2's decode step and prefill exported to ONNX (benchmarks/models/decode_onnx.py: torch.onnx's
dynamo exporter, the past length symbolic) and their MatMuls quantized to int4 by ONNX Runtime's
MatMulNBitsQuantizer: ember runs them on the kernels of its own int4 weights. The exporter's
masks are computed from positions (arange against the cache's size; a prefill's causal
triangle), so ember.passes.position_masks reads them and fold_attention drops them: the step's
attentions read the cache in place (appended: no copy, the one-query routine), the prefill's are
causal without a mask, the products are gemm_nbits (the LM head's a GEMV of the last
position: slice_products takes the exporter's gather of it); numbers against ONNX Runtime's on the
same files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ember  # noqa: E402
from benchmarks.models.decode import gpt2_lm, heads  # noqa: E402
from benchmarks.models.decode_onnx import export, quantize, session  # noqa: E402
from ember.ops.attention import SDPA  # noqa: E402

PROMPT, MAX_LEN = 6, 40
RNG = np.random.default_rng()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(prefill.onnx, step.onnx) of the reduced GPT-2, int4 in blocks of 32, float32 activations
    (accuracy level 0: ONNX Runtime's products as ember's, to compare them closely)."""
    folder = tmp_path_factory.mktemp("gpt2-onnx")
    model = gpt2_lm(small=True)
    return model, [quantize(p, p, 4, 32, accuracy_level=0) for p in export(model, folder, PROMPT, MAX_LEN)]


def test_step_reads_the_cache_in_place(files):
    model, (_, step_file) = files
    step = ember.compile(str(step_file))
    layers, n, dim = heads(model)
    attentions = [x for x in step.graph.nodes if x.op == SDPA]
    assert len(attentions) == layers and all(a.attrs["appended"] and len(a.inputs) == 5 for a in attentions)
    ops = {x.op for x in step.graph.nodes}
    assert not ops & {"concat", "matmul", "softmax", "where"} and "gemm_nbits" in ops
    ids = np.array([[7]], dtype=np.int64)
    run = session(step_file, 1)
    for past in (3, 29):
        kv = [RNG.standard_normal((1, past, n, dim)).astype(np.float32) for _ in range(2 * layers)]
        for got, want in zip(step(ids, *kv), run(ids, *kv)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_prefill_is_causal_without_a_mask(files):
    model, (prefill_file, _) = files
    prefill = ember.compile(str(prefill_file))
    attentions = [x for x in prefill.graph.nodes if x.op == SDPA]
    assert len(attentions) == heads(model)[0] and all(a.attrs["causal"] and len(a.inputs) == 3 for a in attentions)
    head = [x for x in prefill.graph.nodes if x.op == "gemm_nbits"][-1]  # the last position's logits alone: a GEMV
    assert head.attrs["n"] == model.config.vocab_size and head.inputs[0].type.shape[0] == 1
    ids = RNG.integers(0, model.config.vocab_size, (1, 11))
    for got, want in zip(prefill(ids), session(prefill_file, 1)(ids)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
