"""GGUF weights in (ember/frontend/gguf.py): a reduced GPT-2 written by the `gguf` package the way
llama.cpp's converter writes it (matrices (out, in), Q8_0 or Q4_0, the rest F32), read back: the
dequantization of every quantized tensor bit-exact against gguf.quants.dequantize, the decode
step compiled on the file's own codes (every product a gemm_nbits) against torch on the same
dequantized weights (within the rounding of the rows to int8 where the target multiplies int4
codes on VNNI); a reduced LLaMA written the same way (attn_q and attn_k permuted as
llama.cpp's converter does) read back and run likewise; another tensor type or architecture is a
WeightsFileError naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ember  # noqa: E402
from benchmarks.models.decode import RowStep, Step, cache_shape, gpt2_lm, heads, llama_lm  # noqa: E402
from ember.errors import WeightsFileError  # noqa: E402
from ember.frontend.gguf import load_gguf  # noqa: E402
from ember.tir.nbits import digest  # noqa: E402

T = gguf.GGMLQuantizationType
CONV = ("attn_qkv", "attn_output", "ffn_up", "ffn_down")


def write_gpt2(path: Path, model, matrices: T, arch: str = "gpt2") -> None:
    """The model's tensors under llama.cpp's names, its matrices quantized to `matrices`."""
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.n_layer)
    w.add_context_length(c.n_positions)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(4 * c.n_embd)
    w.add_head_count(c.n_head)
    w.add_layer_norm_eps(c.layer_norm_epsilon)
    names = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm", "ln_1": "attn_norm",
             "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up",
             "mlp.c_proj": "ffn_down"}
    for hf, p in model.transformer.state_dict().items():
        parts = hf.split(".")
        if parts[-2:] in (["attn", "bias"], ["attn", "masked_bias"]):  # the causal mask's buffers
            continue
        block = f"blk.{parts[1]}." if parts[0] == "h" else ""
        key = ".".join(parts[2:-1] if block else parts[:-1])
        name = f"{block}{names[key]}.{parts[-1]}"
        data = p.numpy()
        if names[key] in CONV and data.ndim == 2:
            data = np.ascontiguousarray(data.T)
        if data.ndim == 2 and name != "position_embd.weight":
            w.add_tensor(name, gguf.quants.quantize(data, matrices), raw_dtype=matrices)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The reduced GPT-2 written with Q8_0 and with Q4_0 matrices."""
    folder, model = tmp_path_factory.mktemp("gguf"), gpt2_lm(small=True)
    for qtype in (T.Q8_0, T.Q4_0):
        write_gpt2(folder / f"{qtype.name}.gguf", model, qtype)
    return folder


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0])
def test_dequantization_is_bit_exact(files, qtype):
    g = load_gguf(files / f"{qtype.name}.gguf")
    reader = gguf.GGUFReader(str(files / f"{qtype.name}.gguf"))
    quantized = [t for t in reader.tensors if t.tensor_type == qtype]
    assert len(quantized) == 1 + 4 * g.model.config.n_layer == len(g.weights)
    for t in quantized:
        want = gguf.quants.dequantize(t.data, qtype)
        q = g.weights[digest(want.T)]
        assert q.bits == (8 if qtype == T.Q8_0 else 4)
        assert np.array_equal(q.dense(want.shape[0]).T, want)
    params = dict(g.model.named_parameters())
    np.testing.assert_array_equal(params["transformer.wte.weight"].detach().numpy(),
                                  gguf.quants.dequantize(reader.tensors[0].data, qtype))


def test_gguf_gpt2_step_runs_on_the_files_codes(files):
    g = load_gguf(files / "Q4_0.gguf")
    kv = [torch.zeros(cache_shape(g.model, 4)) for _ in range(2 * g.model.config.n_layer)]
    past = torch.export.Dim("past", min=1, max=31)
    ids = torch.zeros((1, 1), dtype=torch.int64)
    step = ember.compile(Step(g.model).eval(), (ids, *kv), dynamic_shapes=(None, tuple({2: past} for _ in kv)),
                         weights=g.weights)
    ops = [n.op for n in step.graph.nodes]
    assert ops.count("gemm_nbits") == 1 + 4 * g.model.config.n_layer and "gemm" not in ops
    ids = torch.tensor([[7]])
    kv = [torch.randn(cache_shape(g.model, 9)) for _ in kv]
    got = step(ids, *kv)
    with torch.no_grad():
        want = Step(g.model)(ids, *kv)
    assert _error(got[0], want[0]) < 0.05, _error(got[0], want[0])  # the int8 rows' rounding (VNNI's)


def _error(got, want) -> float:
    """||got - want|| / ||want||."""
    return float(np.linalg.norm(got.numpy() - want.numpy()) / np.linalg.norm(want.numpy()))


def test_what_ember_does_not_read_is_named(tmp_path):
    model = gpt2_lm(small=True)
    write_gpt2(tmp_path / "q5.gguf", model, T.Q5_0)
    with pytest.raises(WeightsFileError, match=r"tensor 'token_embd.weight' is of type Q5_0; ember reads F32, F16, "
                                               r"Q8_0, Q4_0"):
        load_gguf(tmp_path / "q5.gguf")
    write_gpt2(tmp_path / "falcon.gguf", model, T.Q8_0, arch="falcon")
    with pytest.raises(WeightsFileError, match="architecture 'falcon': ember maps gpt2, llama"):
        load_gguf(tmp_path / "falcon.gguf")


def write_llama(path: Path, model, matrices: T) -> None:
    """A LlamaForCausalLM's tensors as llama.cpp's converter writes them: attn_q's and attn_k's
    rows permuted within each head (its rotary pairs), every matrix quantized to `matrices`."""
    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"] if hasattr(c, "rope_parameters") else c.rope_theta)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for hf, p in model.state_dict().items():
        parts = hf.split(".")
        if parts[0] == "lm_head":
            name = "output.weight"
        elif parts[1] == "embed_tokens":
            name = "token_embd.weight"
        elif parts[1] == "norm":
            name = "output_norm.weight"
        else:
            name = f"blk.{parts[2]}.{names['.'.join(parts[3:-1])]}.weight"
        data = p.numpy()
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = c.num_attention_heads if "attn_q" in name else c.num_key_value_heads
            data = data.reshape(heads, 2, data.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(data.shape)
        if data.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(data), matrices), raw_dtype=matrices)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_llama_on_the_files_codes(tmp_path):
    """A LLaMA file (Q4_0): attn_q's rows back in transformers' order, bit-exact against the
    gguf package's dequantization; the step compiled on the file's codes (every product a
    gemm_nbits) against torch on the same dequantized weights."""
    write_llama(tmp_path / "llama.gguf", llama_lm(small=True), T.Q4_0)  # 4 heads over 2 key/value heads
    g = load_gguf(tmp_path / "llama.gguf")
    c = g.model.config
    reader = gguf.GGUFReader(str(tmp_path / "llama.gguf"))
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    want = gguf.quants.dequantize(q.data, T.Q4_0)
    want = want.reshape(c.num_attention_heads, -1, 2, want.shape[1]).swapaxes(1, 2).reshape(want.shape)
    got = dict(g.model.named_parameters())["model.layers.0.self_attn.q_proj.weight"].detach().numpy()
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(g.weights[digest(want.T)].dense(want.shape[0]).T, want)
    layers, n, dim = heads(g.model)
    kv = [torch.zeros((1, 4, n, dim)) for _ in range(2 * layers)]
    past = torch.export.Dim("past", min=1, max=31)
    step = ember.compile(RowStep(g.model).eval(), (torch.zeros((1, 1), dtype=torch.int64), *kv),
                         dynamic_shapes=(None, tuple({1: past} for _ in kv)), weights=g.weights)
    ops = [n.op for n in step.graph.nodes]
    # q, k and v, gate and up each one product (fuse_siblings) over the file's codes joined
    assert ops.count("gemm_nbits") == 1 + 4 * layers and "gemm" not in ops
    ids, kv = torch.tensor([[7]]), [torch.randn((1, 9, n, dim)) for _ in kv]
    with torch.no_grad():
        want = RowStep(g.model)(ids, *kv)
    got = step(ids, *kv)[0]
    assert _error(got, want[0]) < 0.05, _error(got, want[0])  # the int8 rows' rounding (VNNI's)
