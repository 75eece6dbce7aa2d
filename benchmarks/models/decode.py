"""GPT-2 and LLaMA greedy generation with a KV cache, as ember compiles it: transformers'
GPT2LMHeadModel and LlamaForCausalLM (random weights; small=True: 2 layers, hidden 64), the step
exported with the cache as explicit tensors.

`Step(model)` takes the token ids and the cache as flat tensors (keys and values of each layer,
each (1, heads, past, head_dim)) and returns the logits of the last position and the cache one
position longer: the step writes no state, so torch.export traces it, and ember compiles it once
with the past length a symbol (`torch.export.Dim("past")`): the new cache is `past + 1` long.
With no cache, the same module is the prefill of a prompt (its length the symbol "seq").

`ember_generate` runs the prefill once and then one step per token, feeding each step's cache to
the next (ember's arrays, no copies between steps but the step's own concatenation);
`torch_generate` runs the same module eagerly; `hf_generate` is transformers' own `generate`
with its DynamicCache. Greedy: each token is the argmax of the last logits.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn


def gpt2_lm(small: bool = False, seed: int = 0):
    """GPT2LMHeadModel from its default config (or the reduced one, its weights drawn wider so that
    greedy tokens vary), random weights drawn from `seed`, eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config() if not small else GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=1000,
                                                       initializer_range=0.3, bos_token_id=1, eos_token_id=1)
    return GPT2LMHeadModel(config).eval()


def llama_lm(small: bool = False, seed: int = 0, kv_heads: int | None = None, **sizes):
    """LlamaForCausalLM from a config of GPT-2 small's size (hidden 768, 12 layers of 12 heads over
    4 key/value heads, MLP 2048, vocabulary 32000, untied head: 125 M parameters) or the reduced
    one (2 layers, hidden 64, 4 heads over 2 key/value heads, its weights drawn wider so that
    greedy tokens vary), random weights drawn from `seed`, eval mode; `kv_heads` another count of
    key/value heads, `sizes` other values of the config's sizes (hidden_size=256: weights large
    enough for ember.passes.pack_weights). Grouped heads reach the attention as they are (torch's
    enable_gqa, read by ember's attention per group), not through transformers' repeat_kv, which
    copies the cache once per group: see ember.frontend.gguf.unmasked_attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ember.frontend.gguf import unmasked_attention

    torch.manual_seed(seed)
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=1000, initializer_range=0.3) if small else \
        dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, vocab_size=32000)
    size.update(sizes)
    kv_heads = kv_heads or size["num_attention_heads"] // (2 if small else 3)
    grouped = kv_heads != size["num_attention_heads"]
    config = LlamaConfig(**size, num_key_value_heads=kv_heads, max_position_embeddings=2048, bos_token_id=1,
                         eos_token_id=1, attn_implementation=unmasked_attention() if grouped else "sdpa")
    return LlamaForCausalLM(config).eval()


class Step(nn.Module):
    """One forward of the model over `ids` after the cache `kv` (k0, v0, k1, v1, ...; none: a
    prefill): (logits of the last position, *the cache with ids' positions appended)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, *kv):
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for layer in range(len(kv) // 2):
            cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        new = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits[:, -1], *new)


class RowStep(nn.Module):
    """One forward of the model over `ids` after a cache kept by the caller: `kv` (k0, v0, k1, ...)
    are the cache's first `past` positions, position-major (1, past, heads, head_dim), so that
    they are a contiguous prefix of one preallocated buffer; the step returns the logits of the
    last position and only its own positions' keys and values (1, len(ids), heads, head_dim),
    which the caller writes after the cache. The attention reads the cache where it is
    (ember.passes.fold_cache_append): nothing cache-sized is copied per step. With no cache,
    the prefill of a prompt (its rows: the whole prompt's)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, *kv):
        cache = _RowCache(self.model.config, kv)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        return (out.logits[:, -1], *cache.rows)


def _row_cache_class():
    from transformers.cache_utils import DynamicCache

    class RowCache(DynamicCache):
        """A DynamicCache (its lengths, for the masks and positions) whose update gives the
        attention concat(the caller's cache, the new positions), position-major, and records the
        new positions as the step's rows; the DynamicCache's own concatenation is read by
        nothing and goes (dead code in the compiled step)."""

        def __init__(self, config, kv):
            super().__init__(config=config)
            self.kv, self.rows = kv, []
            for layer in range(len(kv) // 2):
                super().update(kv[2 * layer].transpose(1, 2), kv[2 * layer + 1].transpose(1, 2), layer)

        def update(self, keys, values, layer_idx, *args, **kwargs):
            super().update(keys, values, layer_idx, *args, **kwargs)
            rows = [keys.transpose(1, 2), values.transpose(1, 2)]
            self.rows += rows
            if not self.kv:
                return keys, values
            past = self.kv[2 * layer_idx:2 * layer_idx + 2]
            return tuple(torch.cat([p, r], 1).transpose(1, 2) for p, r in zip(past, rows))

    return RowCache


def _RowCache(config, kv):  # noqa: N802 (a class made once transformers is imported)
    global _RowCache
    cls = _row_cache_class()
    _RowCache = cls
    return cls(config, kv)


def heads(model: nn.Module) -> tuple[int, int, int]:
    """(layers, heads, head_dim) of the model's key/value cache."""
    c = model.config
    layers = getattr(c, "num_hidden_layers", None) or c.n_layer
    n = getattr(c, "num_key_value_heads", None) or getattr(c, "num_attention_heads", None) or c.n_head
    dim = getattr(c, "head_dim", None) or c.hidden_size // (getattr(c, "num_attention_heads", None) or c.n_head)
    return layers, n, dim


def compile_in_place(model: nn.Module, prompt_len: int, max_len: int, **options):
    """(prefill, step) of RowStep, each compiled once: the prompt's length "seq" in [2, max_len],
    the cache's "past" in [1, max_len - 1]."""
    return compile_prefill(model, prompt_len, max_len, **options), compile_step(model, prompt_len, max_len, **options)


def compile_prefill(model: nn.Module, prompt_len: int, max_len: int, **options):
    """RowStep's prefill compiled once, the prompt's length "seq" in [2, max_len] (a kv_cache
    option changes nothing: a prefill reads no cache)."""
    import ember

    ids = torch.zeros((1, prompt_len), dtype=torch.int64)
    seq = torch.export.Dim("seq", min=2, max=max_len)
    return ember.compile(RowStep(model).eval(), (ids,), dynamic_shapes=({1: seq},), **options)


def compile_step(model: nn.Module, prompt_len: int, max_len: int, **options):
    """RowStep's decode step compiled once, the cache's length "past" in [1, max_len - 1]."""
    import ember

    layers, n, dim = heads(model)
    kv = [torch.zeros((1, prompt_len, n, dim)) for _ in range(2 * layers)]
    past = torch.export.Dim("past", min=1, max=max_len - 1)
    return ember.compile(RowStep(model).eval(), (torch.zeros((1, 1), dtype=torch.int64), *kv),
                         dynamic_shapes=(None, tuple({1: past} for _ in kv)), **options)


def generate_in_place(prefill, decode, prompt, steps: int, max_len: int, times: list | None = None,
                      feed: list[int] | None = None, logits_out: list | None = None) -> list[int]:
    """Greedy tokens of RowStep's prefill and step over one preallocated cache buffer per key and
    value of each layer, (1, max_len, heads, head_dim), in the dtype the step takes its cache in
    (bfloat16 with ember.compile's kv_cache="bf16", the rows rounded as they are written; int8
    with kv_cache="int8", (1, max_len, heads, head_dim + 4), ember.tir.kv_int8: the prefill's rows
    quantized as they are written, a step's returned as int8 rows): each step reads the first
    `past` positions in place and its rows are written at position `past`
    (the time of each step appended to `times`, the row writes and the token's read included).
    `prompt`: a NumPy array, or a torch tensor on the device the models run on (a GPU's: the
    cache there, nothing copied to the host but each token). `feed`: the tokens to feed instead
    of the greedy ones (another run's: the logits of each step on the same context, teacher
    forced); `logits_out`: a list the logits of the prefill and each step are appended to."""
    from ember.tir.kv_int8 import quantize_rows

    on = prompt.device if isinstance(prompt, torch.Tensor) else None
    logits, *rows = prefill(prompt)
    spec = getattr(decode, "spec", None)
    types = [(t.dtype, t.shape[2:]) for t in spec.inputs[1:]] if spec is not None else \
        [("float32", r.shape[2:]) for r in rows]
    bufs = [np.empty((1, max_len, *s), d) if on is None else torch.empty((1, max_len, *s), device=on,
                                                                          dtype=getattr(torch, d))
            for d, s in types]
    # int8 rows: the prefill's float32 quantized here, a step's already the buffer's (ember.ops.kv_rows)
    stored = [(lambda r, b: r if r.dtype == b.dtype else quantize_rows(r)) if d == "int8" else (lambda r, b: r)
              for d, _ in types]
    past = prompt.shape[1]
    for b, r, store in zip(bufs, rows, stored):
        b[:, :past] = store(r, b)
    tokens = [int(logits[0].argmax())]
    for i in range(steps - 1):
        if logits_out is not None:
            logits_out.append(np.array(logits[0]))
        start = time.perf_counter()
        token = tokens[-1] if feed is None else feed[i]
        ids = np.array([[token]], dtype=np.int64) if on is None else torch.tensor([[token]], device=on)
        logits, *rows = decode(ids, *(b[:, :past] for b in bufs))
        for b, r, store in zip(bufs, rows, stored):
            b[:, past] = store(r[:, 0], b)
        past += 1
        tokens.append(int(logits[0].argmax()))
        if times is not None:
            times.append(time.perf_counter() - start)
    if logits_out is not None:
        logits_out.append(np.array(logits[0]))
    return tokens


def cache_shape(model: nn.Module, past: int) -> tuple[int, ...]:
    c = model.config
    return (1, c.n_head, past, c.n_embd // c.n_head)


def compile_decode(model: nn.Module, prompt_len: int, max_len: int, **options):
    """(prefill, step): the prefill of a prompt (its length "seq" in [2, max_len]) and the decode
    step (the cache's length "past" in [1, max_len - 1]), each compiled once."""
    import ember

    step = Step(model).eval()
    ids = torch.zeros((1, prompt_len), dtype=torch.int64)
    seq = torch.export.Dim("seq", min=2, max=max_len)
    prefill = ember.compile(step, (ids,), dynamic_shapes=({1: seq},), **options)
    kv = [torch.zeros(cache_shape(model, prompt_len)) for _ in range(2 * model.config.n_layer)]
    past = torch.export.Dim("past", min=1, max=max_len - 1)
    decode = ember.compile(step, (ids[:, :1], *kv), dynamic_shapes=(None, tuple({2: past} for _ in kv)), **options)
    return prefill, decode


def ember_generate(prefill, decode, prompt: np.ndarray, steps: int, times: list | None = None) -> list[int]:
    """Greedy tokens: the prefill, then `steps - 1` decode steps, each token fed back (the time of
    each step appended to `times`)."""
    logits, *kv = prefill(prompt)
    tokens = [int(np.argmax(logits[0]))]
    for _ in range(steps - 1):
        start = time.perf_counter()
        logits, *kv = decode(np.array([[tokens[-1]]], dtype=np.int64), *kv)
        tokens.append(int(np.argmax(logits[0])))
        if times is not None:
            times.append(time.perf_counter() - start)
    return tokens


@torch.no_grad()
def torch_generate(model: nn.Module, prompt: torch.Tensor, steps: int, times: list | None = None) -> list[int]:
    """The same greedy loop on the same Step module, eagerly."""
    step = Step(model).eval()
    logits, *kv = step(prompt)
    tokens = [int(logits[0].argmax())]
    for _ in range(steps - 1):
        start = time.perf_counter()
        logits, *kv = step(torch.tensor([[tokens[-1]]], device=prompt.device), *kv)
        tokens.append(int(logits[0].argmax()))
        if times is not None:
            times.append(time.perf_counter() - start)
    return tokens


@torch.no_grad()
def hf_generate(model: nn.Module, prompt: torch.Tensor, steps: int) -> list[int]:
    """transformers' own greedy `generate` with its cache."""
    out = model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, use_cache=True,
                         attention_mask=torch.ones_like(prompt), pad_token_id=0)
    return out[0, prompt.shape[1]:].tolist()
