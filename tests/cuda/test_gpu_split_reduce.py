"""A whole tensor reduced to one value over many elements in two kernels (ember.passes.
split_reduce: a block's float32 partial of each contiguous part, then one block over the
partials in order): sum, mean, prod, max and min of an odd static size, float32 and float16 (summed in
fp32), and a sum and min over a symbolic batch, with LARGE lowered and a GPU of 2
multiprocessors (4 parts) so that the interpreter runs them quickly; every kernel built by
NVRTC, run with GPU semantics (blocks in any order) against NumPy, twice to the same bits."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc

import ember
from ember.passes import split_reduce
from ember.target import GPU, Target

RNG = np.random.default_rng()


class Reductions(torch.nn.Module):
    def forward(self, x, y, z):
        return x.sum(), x.mean(), x.amax(), x.amin(), y.sum(), y.amin(), z.sum(), z.amax(), (x * 1e-3 + 1).prod()


@pytest.fixture(scope="module")
def compiled():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(split_reduce, "LARGE", 4096)
        x, y = torch.randn(37, 113), torch.randn(3, 1031)  # (4181 and n x 1031: no part divides them)
        z = torch.randn(4099).half()
        return ember.compile(Reductions(), (x, y, z), target=Target("cuda", simulate=True, gpu=GPU(multiprocessors=2)),
                             dynamic_shapes=(None, {0: torch.export.Dim("n")}, None))


@needs_nvrtc
@pytest.mark.parametrize("n", [5])
def test_two_kernels_against_numpy(compiled, n):
    x, y = RNG.standard_normal((37, 113)).astype("float32"), RNG.standard_normal((n, 1031)).astype("float32")
    z = RNG.standard_normal(4099).astype("float16")
    outs = compiled(x, y, z)
    wide = [a.astype(np.float64) for a in (x, y, z)]
    want = [wide[0].sum(), wide[0].mean(), x.max(), x.min(), wide[1].sum(), y.min(), wide[2].sum(), z.max(),
            (np.float32(1e-3) * x + 1).astype(np.float64).prod()]
    l1 = [np.abs(a).sum() for a in wide]  # (a float32 sum's error: up to about n eps of it; max and min exact)
    slack = [l1[0], l1[0] / x.size, 0, 0, l1[1], 0, l1[2], 0, x.size * abs(want[-1])]
    for k, (got, ref) in enumerate(zip(outs, want, strict=True)):
        assert got.shape == () and got.dtype == (np.float16 if k in (6, 7) else np.float32)
        tol = 1e-6 * slack[k] + np.finfo(got.dtype).eps * abs(ref)  # (and the result's rounding)
        assert abs(float(got) - ref) <= tol, f"output {k}: {got} against {ref}"
    assert all(a.tobytes() == b.tobytes() for a, b in zip(outs, compiled(x, y, z), strict=True))  # the same bits


def test_the_partials_are_kernels_of_their_own(compiled):
    """Each of the nine reductions (x's sum and mean share their partials' kernel)."""
    nodes = [n for k in compiled.spec.kernels if "reduce_parts" in k.ops for n in k.nodes if n.endswith("_partials")]
    assert len(nodes) == 9 and all(n.endswith("_partials") for n in nodes)


class WideSums(torch.nn.Module):
    def forward(self, x):
        return x.sum(), x.mean()


@needs_nvrtc
def test_a_float64_sum_keeps_float64_partials(monkeypatch):
    """Values of 1e8 + a random part: float32 partials lost all but 7 digits (an error of about
    1e5 in a sum of 4e11); float64 ones keep the sum to 1e-12 of it."""
    monkeypatch.setattr(split_reduce, "LARGE", 4096)
    x = RNG.standard_normal(4099) * 1e3 + 1e8
    compiled = ember.compile(WideSums(), (torch.from_numpy(x),),
                             target=Target("cuda", simulate=True, gpu=GPU(multiprocessors=2)))
    total, mean = compiled(x)
    assert "reduce_parts" in {op for k in compiled.spec.kernels for op in k.ops}
    assert total.dtype == np.float64 and abs(float(total) - x.sum()) <= 1e-12 * np.abs(x).sum()
    assert abs(float(mean) - x.mean()) <= 1e-12 * np.abs(x).mean()
