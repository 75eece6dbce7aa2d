"""CUDA models with symbolic sizes: run with GPU semantics at each size (a KV cache step after
step), kernels that take the sizes and compute their grids per launch (causal attention over
symbolic tokens one flash_attention on Tensor Cores in fp16), and on the stand-in
driver a CUDA graph captured per size and kept."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import SIMULATED, TOL
from stand_in_driver import on_stand_in

import ember
from ember.errors import ArgumentTypeError

pytestmark = needs_nvrtc


def test_symbolic_sizes_run_with_gpu_semantics_at_each_size():
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.LayerNorm(5)).eval()
    cm = ember.compile(model, (torch.randn(2, 3, 6),), dynamic_shapes=({1: torch.export.Dim("seq", max=16)},),
                       target=SIMULATED)
    for seq in (3, 7, 3):
        x = torch.randn(2, seq, 6)
        with torch.no_grad():
            np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=TOL, atol=TOL)


class CacheStep(torch.nn.Module):
    """A decode step of one attention head: the new position's key and value appended to a cache
    of symbolic length, the query attending to all of it; returns the output and the longer cache."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, keys, values):
        q, k, v = self.qkv(x).chunk(3, -1)
        keys, values = torch.cat([keys, k], 1), torch.cat([values, v], 1)
        scores = torch.softmax(q @ keys.transpose(1, 2) / 8 ** 0.5, -1)
        return self.out(scores @ values), keys, values


def test_a_kv_cache_decode_step_with_a_symbolic_cache_length_runs_step_after_step():
    torch.manual_seed(5)
    model = CacheStep().eval()
    past = torch.export.Dim("past", min=1, max=16)
    cache = torch.randn(1, 3, 8)
    cm = ember.compile(model, (torch.randn(1, 1, 8), cache, cache.clone()), dynamic_shapes=(None, {1: past}, {1: past}),
                       target=SIMULATED)
    keys, values = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    for _ in range(3):  # past 3, 4, 5: each step's cache the previous step's output
        x = torch.randn(1, 1, 8)
        with torch.no_grad():
            expected = model(x, keys, values)
        got = cm(x, keys, values)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=TOL, atol=TOL)
        keys, values = got[1], got[2]


def test_symbolic_kernels_take_their_sizes_and_compute_their_grids(symbolic_mlp):
    _, cm = symbolic_mlp
    kernels = cm._entry.kernels.values()
    assert all(k.grid is None and k.func.size_vars for k in kernels)
    assert all("int64_t batch" in k.source for k in kernels)
    k = next(iter(kernels))
    assert k.grid_of([1]) == (1, 1, 1) and k.grid_of([8]) >= k.grid_of([1]) and 0 in k.grid_of([0])  # (no launch)
    with pytest.raises(ArgumentTypeError, match="has symbolic sizes"):
        k(np.ones((2, 16), np.float32), *[np.ones(1, np.float32)] * (len(k.func.params) - 1))


def test_symbolic_sizes_on_the_driver_path_capture_a_graph_per_size_and_keep_it(symbolic_mlp, host_driver):
    model, cm = symbolic_mlp
    on_stand_in(cm)
    rng = np.random.default_rng(5)

    def call(batch):
        x = rng.standard_normal((batch, 16), np.float32)
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x), expected, rtol=TOL, atol=TOL)
        return cm._graphs.captures, host_driver.graph_launches

    assert call(3) == (0, 0)  # the first call: one by one
    assert call(3) == (1, 1)  # the same sizes again: captured, replayed
    assert call(5) == (1, 1) and "the sizes batch=5 are new" in cm.summary()  # new sizes: one by one
    assert call(5) == (2, 2)
    assert call(3) == (2, 3)  # the first size's graph again: the arena and slots reserved for batch <= 8
    assert "replayed as one CUDA graph (2 captured" in cm.summary()
    arena = cm._arena
    assert call(8) == (2, 3) and cm._arena == arena


class CausalAttention(torch.nn.Module):
    """q, k, v of one head over symbolic tokens (the thirds of x's features), attending causally."""

    def forward(self, x):
        q, k, v = (t.unsqueeze(1) for t in x.chunk(3, -1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1)


def test_causal_attention_over_symbolic_tokens_is_one_fused_kernel_in_fp16():
    model = CausalAttention()
    cm = ember.compile(model, (torch.randn(1, 5, 48),), dynamic_shapes=({1: torch.export.Dim("tokens", max=256)},),
                       target=SIMULATED, precision="fp16")
    assert sum("flash_attention" in k.ops for k in cm.kernels) == 1 and "mma.sync.aligned.m16n8k16" in cm.source
    for tokens in (1, 37):
        x = torch.randn(1, tokens, 48)
        ref = model(x).numpy()
        assert np.linalg.norm(cm(x).numpy() - ref) / np.linalg.norm(ref) <= 1e-2  # fp16's tolerance against fp32
