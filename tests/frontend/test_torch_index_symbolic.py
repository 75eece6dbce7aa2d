"""Advanced indexing (aten.index.Tensor with several index tensors, None gaps) over static and
symbolic sizes (ember/frontend/torch/converters/shape.py: `index`), against torch eager: each
pattern compiled once with its sizes symbolic and called at several sizes; a property test of
the placement rules on the reference evaluator; and transformers' GPT-2, whose causal mask
indexes a (1, seq) tensor with two broadcast index tensors, compiled once for every length."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim
from torch_check import check_import

import ember
from ember.runtime.model import CompiledModel
from ember.testing import assert_close

S, T, N, M = (Dim(name, min=2, max=64) for name in ("s", "t", "n", "m"))


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def mask_pattern(x):
    """transformers' create_causal_mask: x (1, s) indexed by (1, 1, 1, 1) and (1, 1, s, 1) aranges."""
    batch = torch.arange(x.shape[0])[:, None, None, None]
    rows = torch.arange(x.shape[1])[None, None, :, None]
    return x[batch, rows] * 2


# name -> (function, shapes of the inputs at sizes (s, t, n, m), dynamic shapes, index inputs' bounds)
CASES = {
    "two broadcast": (lambda x, i, j: x[i, j], lambda s, t, n, m: [(s, t, 3), (n, 1), (m,)],
                      ({0: S, 1: T}, {0: N}, {0: M}), {1: 0, 2: 1}),
    "three broadcast": (lambda x, i, j, k: x[i, j, k], lambda s, t, n, m: [(s, t, 5), (n, 1, 1), (m, 1), (3,)],
                        ({0: S, 1: T}, {0: N}, {0: M}, None), {1: 0, 2: 1, 3: 2}),
    "None gap before": (lambda x, i, j: x[:, i, j], lambda s, t, n, m: [(2, s, t, 3), (n, 1), (m,)],
                        ({1: S, 2: T}, {0: N}, {0: M}), {1: 1, 2: 2}),
    "None gap between": (lambda x, i, j: x[i, :, j], lambda s, t, n, m: [(s, 4, t), (n, 1), (m,)],
                         ({0: S, 2: T}, {0: N}, {0: M}), {1: 0, 2: 2}),
    "mask": (mask_pattern, lambda s, t, n, m: [(1, s)], ({1: S},), {}),
}
SIZES = [(5, 6, 3, 4), (9, 2, 7, 2), (17, 11, 2, 13)]


def inputs_at(shapes, bounds, rng):
    """x random, each index input random in [-size, size) of the dimension it indexes."""
    out = [torch.from_numpy(rng.standard_normal(shapes[0]).astype(np.float32))]
    for k, shape in enumerate(shapes[1:], 1):
        n = shapes[0][bounds[k]]
        out.append(torch.from_numpy(rng.integers(-n, n, shape)))
    return out


@pytest.mark.parametrize("name", CASES)
def test_index_compiled_once_for_every_size(name):
    fn, shapes_at, dynamic, bounds = CASES[name]
    rng = np.random.default_rng(1)
    model = Fn(fn).eval()
    example = tuple(inputs_at(shapes_at(*SIZES[0]), bounds, rng))
    compiled = ember.compile(model, example, dynamic_shapes=(dynamic,))  # (one entry: forward takes *args)
    assert isinstance(compiled, CompiledModel) and compiled.spec.symbols
    library = compiled.library_path
    for sizes in SIZES:
        args = inputs_at(shapes_at(*sizes), bounds, rng)
        expected = model(*args).numpy()
        actual = compiled(*[a.numpy() for a in args])
        assert actual.shape == expected.shape
        assert_close(actual, expected, 0, 0, f"{name} at sizes {sizes}")
    assert compiled.library_path == library


@st.composite
def index_patterns(draw):
    """x of rank 2 to 4; at least two of its dimensions indexed (the rest None, so the index
    tensors may or may not be adjacent), each index tensor of a shape that broadcasts to a
    common one (dimensions of 1, fewer leading dimensions)."""
    shape = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    dims = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=2)))
    common = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    shapes = []
    for _ in dims:
        own = draw(st.lists(st.booleans(), min_size=len(common), max_size=len(common)))
        cut = draw(st.integers(0, len(common) - 1))  # (a 0-d index is exported as a Python int)
        shapes.append(tuple(n if keep else 1 for n, keep in zip(common, own))[cut:])
    return shape, dims, shapes, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=15, deadline=None)
@given(index_patterns())
def test_index_placement_against_torch(pattern):
    shape, dims, shapes, seed = pattern
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    indices = [torch.from_numpy(rng.integers(-shape[d], shape[d], s)) for d, s in zip(dims, shapes)]

    def fn(x, *indices):
        key = [slice(None)] * (dims[-1] + 1)
        for d, i in zip(dims, indices):
            key[d] = i
        return x[tuple(key)]

    check_import(Fn(fn), x, *indices, rtol=0, atol=0)


# -- transformers' GPT-2 --------------------------------------------------------------------------

class LastHiddenState(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).last_hidden_state


@pytest.fixture(scope="module")
def gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=256)
    model = LastHiddenState(transformers.GPT2Model(config)).eval()
    ids = torch.randint(0, 500, (1, 7))
    compiled = ember.compile(model, (ids,), dynamic_shapes=({1: Dim("seq", min=1, max=256)},))
    return model, compiled


def test_gpt2_dynamic_sequence_length(gpt2):
    model, compiled = gpt2
    assert isinstance(compiled, CompiledModel)
    assert compiled.spec.inputs[0].shape == (1, "seq")
    library = compiled.library_path
    rng = np.random.default_rng(2)
    for n in (1, 7, 33):
        ids = torch.from_numpy(rng.integers(0, 500, (1, n)))
        with torch.no_grad():
            expected = model(ids).numpy()
        assert_close(compiled(ids.numpy()), expected, 1e-4, 1e-4, f"GPT-2 at {n} tokens")
    assert compiled.library_path == library
