"""benchmarks/gpu_profile.py's tables of a model compiled for target "cuda": each kernel's bytes
(its launches' buffers) and FLOPs (its products), its share of a profiled call and its bound, and
its grid against the GPU's multiprocessors; the profile's calls held by `hold` (the stand-in
driver's events hold the host's times)."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import SmallCNN

import ember
from benchmarks.gpu_profile import grid_lines, kernel_work, profile_lines

pytestmark = needs_nvrtc
PEAKS = {"copy_gbs": 1000.0, "fp16_tflops": 100.0, "fp32_tflops": 10.0}


@pytest.fixture(scope="module")
def cnn_fp16():
    torch.manual_seed(4)
    return ember.compile(SmallCNN().eval(), (torch.randn(1, 2, 6, 6),), target="cuda", precision="fp16")


def test_a_kernels_work_is_its_buffers_bytes_and_its_products_flops(cnn_fp16):
    work = kernel_work(cnn_fp16)
    conv = next(k.name for k in cnn_fp16.kernels if "conv2d_gemm" in k.ops)
    # x, the weights (4, 2*3*3), the bias and the output, in fp16; 2 x 4 channels x 36 positions x 18 taps
    assert work[conv] == (2 * (72 + 72 + 4 + 144), 2 * 4 * 36 * 18)
    products = {k.name for k in cnn_fp16.kernels if {"gemm", "conv2d_gemm"} & set(k.ops)}
    assert {name for name, (_, flops) in work.items() if flops} == products
    idle = {line.split()[0] for line in grid_lines(cnn_fp16, 2)[1:] if line.endswith("< 2 SMs")}
    assert idle == {k.name for k in cnn_fp16.kernels} - {conv}  # (its 2 blocks fill 2 SMs; the others have one)


def test_the_profile_ranks_kernels_by_time_with_their_share_and_bound(cnn_fp16, host_driver):
    held = []
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 6)).astype(np.float32)
    prof = cnn_fp16.profile(x, repeat=2, hold=lambda: held.append(1))
    assert len(held) == 2
    lines = profile_lines(cnn_fp16, prof, PEAKS, 132, 2, "fp16")
    ranked = sorted(prof.kernels, key=lambda t: -t.median_us)
    assert [line.split()[0] for line in lines[1:3]] == [t.name for t in ranked[:2]]
    share = float(lines[1].split()[3].rstrip("%")) / 100
    assert share == pytest.approx(ranked[0].median_us / prof.total_us, abs=1e-3)
    assert lines[3].startswith("  2 more kernels") and "4 kernels, 4 of them under 132 blocks" in lines[4]
