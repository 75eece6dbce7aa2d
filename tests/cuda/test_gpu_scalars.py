"""0-d outputs on the GPU: a whole tensor reduced to one value (sum, mean, max, a loss) in one
block whose threads' partials are folded through shared memory and warp shuffles, stored by one
thread; a scalar of no loops (a size, an expression of sums) on one thread. One model with five
such outputs over a symbolic batch, every kernel built by NVRTC, run on the interpreter with
GPU semantics (races checked) against torch at two batch sizes."""

import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import SIMULATED

import ember
from ember.testing import assert_close


class Scalars(torch.nn.Module):
    def forward(self, x, y):
        loss = torch.nn.functional.mse_loss(y, y * 0.5 + 1)
        return x.sum(), x.mean(), y.amax(), loss, (x * x).sum() + x.shape[0]


@pytest.fixture(scope="module")
def compiled():
    x, y = torch.randn(5, 613), torch.randn(7, 9)  # (5 x 613: no count of threads divides it, the tail guarded)
    return ember.compile(Scalars(), (x, y), target=SIMULATED, dynamic_shapes=({0: torch.export.Dim("n")}, None))


@needs_nvrtc
@pytest.mark.parametrize("n", [5, 2])
def test_scalar_outputs_on_the_gpu(compiled, n):
    x, y = torch.randn(n, 613), torch.randn(7, 9)
    outs = compiled(x.numpy(), y.numpy())
    for k, (out, ref) in enumerate(zip(outs, Scalars()(x, y), strict=True)):
        assert out.shape == () and out.dtype == ref.numpy().dtype
        assert_close(out, ref.numpy(), 1e-5, 1e-5 * float(ref.abs()) + 1e-6, f"output {k} at batch {n}")
