"""GGUF files (llama.cpp's format, read with the `gguf` package) in: a GPT-2 or LLaMA model's
tensors mapped onto transformers' GPT2LMHeadModel or LlamaForCausalLM, built from the file's
metadata, and its quantized tensors kept as gemm_nbits codes, so that a llama.cpp user's weights
run on ember's kernels:

    g = load_gguf("gpt2.Q4_0.gguf")
    step = ember.compile(Step(g.model), inputs, dynamic_shapes=..., weights=g.weights)

F32 and F16 tensors are set as they are. Q8_0 and Q4_0 tensors are blocks of 32 weights along a
row, each with a float16 scale d: Q8_0 holds 32 int8 codes, w = d q; Q4_0 16 bytes, element j in
the low nibble of byte j and element j + 16 in the high one, w = d (q - 8). They become
gemm_nbits' panels (ember.tir.nbits: int8 and int4 per group of 32, Q4_0 symmetric) with the
scales in float32, and the torch model gets their float32 dequantization, bit for bit what
`gguf.quants.dequantize` gives; by the digest of that weight the compiler's quantize_weights pass
finds the codes again (`weights`, for ember.compile's weights= option).

The names are llama.cpp's (token_embd, position_embd, blk.N.attn_norm, attn_qkv, attn_output,
ffn_norm, ffn_up, ffn_down, output_norm, output: the matrices stored (out, in); LLaMA's attn_q,
attn_k, attn_v and ffn_gate too, its norms RMS norms without bias). llama.cpp's converter permutes
the rows of LLaMA's attn_q and attn_k within each head (its rotary embedding pairs adjacent
elements, transformers' the two halves): the permutation is undone on the rows, codes and
scales alike (whole blocks move, none is requantized). The LM head is tied to token_embd when
the file has no output.weight. Another architecture, another tensor
type, a missing tensor or metadata key, metadata no model is built from (a count that is not a
positive integer, an epsilon or RoPE base that is no number 0 or more, heads that do not divide
the embedding), a tensor of another shape than that model's, or a file the gguf package cannot
parse (missing, truncated, another version) is a WeightsFileError that names it and what ember
reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import WeightsFileError
from ..tir.nbits import QuantizedWeight, digest, pack_int4, pack_int8, pad_columns, unpack

ARCHITECTURES = ("gpt2", "llama")
TYPES = ("F32", "F16", "Q8_0", "Q4_0")
BLOCK = 32  # weights per Q8_0 / Q4_0 block


@dataclass
class GGUFModel:
    """A GGUF file as a torch model (its weights dequantized) and the quantized weights by the
    digest of their float32 form (ember.compile's weights=)."""

    model: object  # transformers' GPT2LMHeadModel or LlamaForCausalLM, eval mode
    weights: dict[str, QuantizedWeight] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # tensor name -> its GGUF type


def load_gguf(path: str | Path) -> GGUFModel:
    """The model of a GGUF file (see the module doc)."""
    import gguf
    import torch

    reader = _open(gguf, path)
    arch = _field(reader, path, "general.architecture")
    if arch not in ARCHITECTURES:
        raise WeightsFileError(f"{path}: architecture {arch!r}: ember maps {', '.join(ARCHITECTURES)}")
    tensors = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        if t.tensor_type.name not in TYPES:
            raise WeightsFileError(f"{path}: tensor {t.name!r} is of type {t.tensor_type.name}; ember reads "
                                   f"{', '.join(TYPES)}")
    embedding = _tensor(tensors, path, "token_embd.weight")
    if len(embedding.shape) != 2:
        dims = tuple(int(d) for d in embedding.shape)
        raise WeightsFileError(f"{path}: tensor 'token_embd.weight' has {len(dims)} dimension(s) {dims}; ember needs "
                               f"a (vocabulary, embedding) matrix")
    vocab = int(embedding.shape[1])
    tied = "output.weight" not in tensors
    field = lambda key: _field(reader, path, f"{arch}.{key}")  # noqa: E731
    heads = field("attention.head_count")
    kv_heads = field("attention.head_count_kv") if f"{arch}.attention.head_count_kv" in reader.fields else heads
    _check_heads(path, field("embedding_length"), heads, kv_heads)
    model, names = (_gpt2 if arch == "gpt2" else _llama)(field, vocab, tied, reader, path)
    params = dict(model.named_parameters(remove_duplicate=False))
    out = GGUFModel(model)
    for hf, name, conv in names:
        t = _tensor(tensors, path, name)
        dense, q = _read(t)
        if tuple(params[hf].shape) != (dense.T if conv else dense).shape:  # (before the rows are unpermuted)
            raise WeightsFileError(f"{path}: tensor {name!r} is {(dense.T if conv else dense).shape} where the model "
                                   f"built from the file's metadata needs {tuple(params[hf].shape)}")
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = model.config.num_attention_heads if "attn_q" in name else model.config.num_key_value_heads
            dense, q = _unpermute(dense, q, heads)
        out.types[name] = t.tensor_type.name
        if q is not None:
            out.weights[digest(dense.T)] = q
        value = dense.T if conv else dense
        with torch.no_grad():
            params[hf].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return out


def _gpt2(field, vocab: int, tied: bool, reader, path):
    from transformers import GPT2Config, GPT2LMHeadModel

    layers = int(field("block_count"))
    config = GPT2Config(n_embd=int(field("embedding_length")), n_layer=layers,
                        n_head=int(field("attention.head_count")), n_positions=int(field("context_length")),
                        n_inner=int(field("feed_forward_length")),
                        layer_norm_epsilon=float(field("attention.layer_norm_epsilon")),
                        vocab_size=vocab, tie_word_embeddings=tied, bos_token_id=_token(reader, path, "bos", vocab),
                        eos_token_id=_token(reader, path, "eos", vocab))
    return GPT2LMHeadModel(config).eval(), list(_gpt2_names(layers, tied))


UNMASKED = "sdpa_unmasked"


def unmasked_attention() -> str:
    """The name of transformers' SDPA attention registered without a mask function (registered
    on first use): a model using it makes no mask (a batch of one without padding: a prefill is
    causal, a step's one query reads the whole cache), and without a mask transformers passes
    grouped key/value heads to scaled_dot_product_attention as they are (enable_gqa), where a mask
    made it repeat them (repeat_kv: a copy of the cache per group, which torch.export also
    refuses over a dynamic cache length)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(UNMASKED, sdpa_attention_forward)
    return UNMASKED


def _llama(field, vocab: int, tied: bool, reader, path):
    from transformers import LlamaConfig, LlamaForCausalLM

    layers = int(field("block_count"))
    heads = int(field("attention.head_count"))
    kv = reader.fields.get("llama.attention.head_count_kv")
    kv_heads = int(kv.contents()) if kv else heads
    base = field("rope.freq_base") if "llama.rope.freq_base" in reader.fields else 10000.0
    config = LlamaConfig(hidden_size=int(field("embedding_length")), num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         attn_implementation=unmasked_attention() if kv_heads != heads else "sdpa",
                         intermediate_size=int(field("feed_forward_length")),
                         max_position_embeddings=int(field("context_length")),
                         rms_norm_eps=float(field("attention.layer_norm_rms_epsilon")),
                         rope_theta=float(base), vocab_size=vocab,
                         tie_word_embeddings=tied, bos_token_id=_token(reader, path, "bos", vocab),
                         eos_token_id=_token(reader, path, "eos", vocab))
    return LlamaForCausalLM(config).eval(), list(_llama_names(layers, tied))


def _unpermute(dense: np.ndarray, q: QuantizedWeight | None, heads: int):
    """attn_q's or attn_k's (out, in) rows in transformers' order: llama.cpp's converter wrote
    rows (head, half, i) as (head, i, half)."""
    rows = dense.shape[0]
    order = np.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(0, 2, 1).reshape(-1)
    if q is not None:  # the codes' and scales' columns (the output features) moved alike
        codes = unpack(q.codes, q.bits)[:, :rows][:, order]
        pack = pack_int8 if q.bits == 8 else pack_int4
        q = QuantizedWeight(q.bits, q.group, pack(codes), pad_columns(q.scales[:, :rows][:, order]))
        return q.dense(rows).T, q
    return dense[order], None


def _read(t) -> tuple[np.ndarray, QuantizedWeight | None]:
    """A tensor's float32 data in NumPy's order (rows of ne0), and its codes if it is quantized
    (for the (ne0, rows) weight a product reads; the gguf package refuses rows of part of a block)."""
    shape = tuple(int(d) for d in reversed(t.shape))
    kind = t.tensor_type.name
    if kind in ("F32", "F16"):
        return np.asarray(t.data).astype(np.float32).reshape(shape), None
    k = int(t.shape[0])
    width = 2 + (BLOCK if kind == "Q8_0" else BLOCK // 2)
    blocks = np.asarray(t.data).reshape(-1, width)
    rows = blocks.shape[0] * BLOCK // k
    scales = blocks[:, :2].copy().view(np.float16).astype(np.float32).reshape(rows, k // BLOCK)
    if kind == "Q8_0":
        codes = blocks[:, 2:].copy().view(np.int8).reshape(rows, k)
        q = QuantizedWeight(8, BLOCK, pack_int8(codes.T), pad_columns(scales.T))
    else:
        nibbles = blocks[:, 2:]
        codes = np.concatenate([nibbles & 15, nibbles >> 4], axis=1).reshape(rows, k)
        q = QuantizedWeight(4, BLOCK, pack_int4(codes.T), pad_columns(scales.T))
    return q.dense(rows).T.reshape(shape), q


def _gpt2_names(layers: int, tied: bool):
    """(transformers' parameter, the GGUF tensor, whether transformers holds it transposed: GPT-2's
    Conv1D keeps (in, out))."""
    yield "transformer.wte.weight", "token_embd.weight", False
    yield "transformer.wpe.weight", "position_embd.weight", False
    for i in range(layers):
        for hf, name, conv in (("ln_1", "attn_norm", False), ("attn.c_attn", "attn_qkv", True),
                               ("attn.c_proj", "attn_output", True), ("ln_2", "ffn_norm", False),
                               ("mlp.c_fc", "ffn_up", True), ("mlp.c_proj", "ffn_down", True)):
            yield f"transformer.h.{i}.{hf}.weight", f"blk.{i}.{name}.weight", conv
            yield f"transformer.h.{i}.{hf}.bias", f"blk.{i}.{name}.bias", False
    yield "transformer.ln_f.weight", "output_norm.weight", False
    yield "transformer.ln_f.bias", "output_norm.bias", False
    if not tied:
        yield "lm_head.weight", "output.weight", False


def _llama_names(layers: int, tied: bool):
    """(transformers' parameter, the GGUF tensor, False: LLaMA's Linear layers keep (out, in))."""
    yield "model.embed_tokens.weight", "token_embd.weight", False
    for i in range(layers):
        for hf, name in (("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"),
                         ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                         ("self_attn.o_proj", "attn_output"), ("post_attention_layernorm", "ffn_norm"),
                         ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
            yield f"model.layers.{i}.{hf}.weight", f"blk.{i}.{name}.weight", False
    yield "model.norm.weight", "output_norm.weight", False
    if not tied:
        yield "lm_head.weight", "output.weight", False


def _tensor(tensors: dict, path, name: str):
    if name not in tensors:
        raise WeightsFileError(f"{path}: no tensor {name!r}, which the model of its architecture needs")
    return tensors[name]


def _token(reader, path, which: str, vocab: int) -> int:
    """The file's bos or eos token, else GPT-2's (50256) within the vocabulary."""
    key = f"tokenizer.ggml.{which}_token_id"
    f = reader.fields.get(key)
    if f is None:
        return min(50256, vocab - 1)
    value = f.contents()
    if isinstance(value, bool) or not isinstance(value, int):
        raise WeightsFileError(f"{path}: metadata key {key!r} is {value!r}; ember needs a token id")
    return value


def _field(reader, path, key: str):
    f = reader.fields.get(key)
    if f is None:
        raise WeightsFileError(f"{path}: no metadata key {key!r}, which the model of its architecture needs")
    value = f.contents()
    if key.endswith(("_count", "_length", "_count_kv")) and (isinstance(value, bool) or not isinstance(value, int)
                                                             or value <= 0):
        raise WeightsFileError(f"{path}: metadata key {key!r} is {value!r}; ember needs a positive integer")
    if key.endswith(("_epsilon", "freq_base")) and (isinstance(value, bool) or not isinstance(value, int | float)
                                                     or not np.isfinite(value) or value < 0):
        raise WeightsFileError(f"{path}: metadata key {key!r} is {value!r}; ember needs a number, 0 or more")
    return value


def _open(gguf, path):
    """The file's reader; a file the gguf package cannot parse (missing, not GGUF, another
    version, cut short: the reader maps every tensor's bytes) is a WeightsFileError naming it."""
    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError, IndexError, KeyError) as e:
        raise WeightsFileError(f"{path}: cannot be read as a GGUF file (missing, another format or version, or "
                               f"truncated): {type(e).__name__}: {e}") from e


def _check_heads(path, embedding: int, heads: int, kv_heads: int) -> None:
    """Head counts that divide the embedding (and the query heads, for grouped key/value heads),
    checked before transformers builds the model (whose own check is a bare ValueError)."""
    if embedding % heads or heads % kv_heads:
        raise WeightsFileError(f"{path}: {heads} heads over {kv_heads} key/value heads do not divide an embedding of "
                               f"{embedding} (heads must divide it, key/value heads the heads)")
