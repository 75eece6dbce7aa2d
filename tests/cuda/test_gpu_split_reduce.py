"""A whole tensor reduced to one value over many elements in two kernels (ember.passes.
split_reduce: a block's float32 partial of each contiguous part, then one block over the
partials in order): sum, mean, prod, max and min of an odd static size, float32 and float16 (summed in
fp32), and a sum and min over a symbolic batch, with LARGE lowered and a GPU of 2
multiprocessors (4 parts) so that the interpreter runs them quickly; every kernel built by
NVRTC, run with GPU semantics (blocks in any order) against NumPy, twice to the same bits; a float64
sum in float64 partials; and a property test over kinds, sizes about LARGE, dtypes, keepdims and a
NaN or infinity anywhere, against torch."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

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


class Reduce(torch.nn.Module):
    def __init__(self, kind: str, keepdims: bool):
        super().__init__()
        self.kind, self.keepdims = kind, keepdims

    def forward(self, x):
        if self.kind == "prod":  # (torch's prod takes one axis)
            return x.reshape(-1).prod(0, keepdim=self.keepdims)
        reduce = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[self.kind]
        return reduce(x, dim=tuple(range(x.dim())), keepdim=self.keepdims)


@needs_nvrtc
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.generate))  # (no shrinking: a compile an example)
@given(kind=st.sampled_from(["sum", "mean", "max", "min", "prod"]), dtype=st.sampled_from(["float32", "float16",
       "bfloat16"]), n=st.sampled_from([4095, 4096, 4097, 4103, 5000]), rows=st.sampled_from([1, 3]),
       keepdims=st.booleans(), special=st.sampled_from([None, "nan", "inf"]), at=st.floats(0, 1))
def test_any_kind_size_dtype_and_special_value_against_torch(kind, dtype, n, rows, keepdims, special, at):
    """Sizes about LARGE (4096 here: one element less stays one kernel), parts that divide none of
    them, half types accumulated in float32, keepdims, and a NaN or an infinity in any part (it
    reaches the result through its partial), against torch in float64 of the same inputs."""
    x = RNG.standard_normal((rows, n // rows))
    x = torch.from_numpy(1 + 1e-3 * x if kind == "prod" else x).to(getattr(torch, dtype))  # (products near 1)
    if special is not None:
        x.view(-1)[int(at * (x.numel() - 1))] = float(special)
    model = Reduce(kind, keepdims)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(split_reduce, "LARGE", 4096)
        compiled = ember.compile(model, (x,), target=Target("cuda", simulate=True, gpu=GPU(multiprocessors=2)))
    got, want = compiled(x), model(x.double()).to(x.dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    eps = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype] + (x.numel() * 6e-8 if kind == "prod" else 0)
    finite = x.double().abs().nan_to_num(0.0, 0.0, 0.0)  # (a float32 sum's error: about n eps of its l1 norm)
    slack = finite.sum() / (x.numel() if kind == "mean" else 1) if kind in ("sum", "mean") else 0.0
    torch.testing.assert_close(got.double(), want.double(), rtol=eps, atol=float(eps * slack) + 1e-30,
                               equal_nan=True)
