"""BERT and GPT-2 (transformers', one layer of 32 features over 8 tokens) compiled for "cuda": the
QKV split, the three head splits and the head merge around the attention are views, so a layer
is seven launches (qkv gemm, flash_attention reading the packed projection in place and writing
(B, S, H*D) for the next gemm, out-proj + add, layer norm, ffn1 + gelu, ffn2 + add, layer norm)
and matches torch in fp32 on the interpreter with GPU semantics; on the stand-in driver a GPT-2
call from the second replays one CUDA graph and matches torch in fp16."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc
from model_cases import SIMULATED
from stand_in_driver import on_stand_in

import ember
from benchmarks.models.hf import LastHiddenState

pytestmark = needs_nvrtc
LAYER = ["gemm", "flash_attention", "gemm", "layer_norm", "gemm", "gemm", "layer_norm"]  # each kernel's first op


def tiny(name: str):
    """(the model, its token ids): one layer, 2 heads of 16, 8 tokens, a vocabulary of 64."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    torch.manual_seed(0)
    if name == "bert":
        config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            vocab_size=64, max_position_embeddings=16)
        config.attn_implementation = "eager"
        model = BertModel(config)
    else:
        model = GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=16,
                                     bos_token_id=0, eos_token_id=0))
    return LastHiddenState(model).eval(), torch.randint(0, 64, (1, 8))


def launched(cm) -> list[tuple[str, ...]]:
    """The operators of each launch of a call, in order."""
    ops = {k.name: k.ops for k in cm.kernels}
    return [ops[launch.kernel] for launch in cm._entry.order]


def test_a_bert_layer_is_seven_launches_around_one_attention_reading_the_packed_projection():
    model, ids = tiny("bert")
    cm = ember.compile(model, (ids,), target=SIMULATED)
    ops = launched(cm)
    assert [o[0] for o in ops] == ["embedding", "add", *LAYER]  # (the embeddings' sum and layer norm: one kernel)
    assert not any(op in ("split", "transpose") for o in ops for op in o)
    with torch.no_grad():
        ref = model(ids).numpy()
    got = cm(ids.numpy())  # on the interpreter with GPU semantics
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-5


@pytest.fixture(scope="module")
def gpt2_fp16():
    """(the model, its ids, the model compiled for "cuda" in fp16: NVRTC's kernels, launched by a driver)."""
    model, ids = tiny("gpt2")
    return model, ids, ember.compile(model, (ids,), target="cuda", precision="fp16")


def test_gpt2_in_fp16_replays_one_cuda_graph_from_the_second_call(gpt2_fp16, host_driver):
    model, ids, cm = gpt2_fp16
    on_stand_in(cm)
    ops = launched(cm)
    assert [o[0] for o in ops] == ["embedding", "layer_norm", "gemm", "flash_attention", "gemm", "layer_norm", "gemm",
                                   "gemm", "layer_norm"]  # (GPT-2's norms come before the products)
    assert ops[-1] == ("layer_norm", "cast")  # the output's cast to float32 stored by the last norm
    assert not any(op in ("split", "transpose") for o in ops for op in o) and "mma.sync.aligned.m16n8k16" in cm.source
    with torch.no_grad():
        ref = model(ids).numpy()
    for call in ("the first call", None):  # launched one by one, then captured and replayed
        got = cm(ids.numpy())
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-2  # fp16's tolerance against fp32
        assert call is None and cm.graph_reason is None or call in cm.graph_reason
    assert (cm._graphs.captures, host_driver.graph_launches) == (1, 1)
    assert f"launches: {len(cm._entry.order)} replayed as one CUDA graph" in cm.summary()
    assert host_driver.launches == 2 * len(cm._entry.order)


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-5), ("fp16", 1e-2)])
def test_gpt2_over_symbolic_tokens_matches_torch_at_two_lengths(precision, tolerance):
    # its position ids are a cumsum over the tokens: the GPU's scan (ember.schedules.gpu.scan)
    model, ids = tiny("gpt2")
    cm = ember.compile(model, (ids,), dynamic_shapes=({1: torch.export.Dim("tokens", max=16)},), target=SIMULATED,
                       precision=precision)
    assert any("cumsum" in k.ops for k in cm.kernels)
    if precision == "fp16":  # every product's epilogue from its mma fragments (ember.cuda.fragment_epilogue)
        assert "mma.sync" in cm.source and "ember_mma_store(" not in cm.source
    for tokens in (3, 11):
        x = torch.randint(0, 64, (1, tokens))
        with torch.no_grad():
            ref = model(x).numpy()
        assert np.linalg.norm(cm(x.numpy()) - ref) / np.linalg.norm(ref) <= tolerance


@needs_gpu
@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-5), ("fp16", 1e-2)])
def test_gpt2_over_symbolic_tokens_on_the_gpu(precision, tolerance):
    model, ids = tiny("gpt2")
    cm = ember.compile(model, (ids,), dynamic_shapes=({1: torch.export.Dim("tokens", max=16)},), target="cuda",
                       precision=precision)
    for tokens in (3, 11, 3):
        x = torch.randint(0, 64, (1, tokens))
        with torch.no_grad():
            ref = model(x).numpy()
        got = cm(x.cuda()).cpu().numpy()
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= tolerance
