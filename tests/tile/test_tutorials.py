"""Every tutorial of examples/triton against NumPy or torch, interpreted and compiled, with fresh
random data of sizes that the block sizes do not divide."""

import pathlib
import runpy

import numpy as np
import pytest
import torch
from layer_norm_check import assert_layer_norm_as_torch
from tile_modes import MODES, launch_mode

import ember.triton as triton
import ember.triton.language as tl

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "triton"




@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size,block", [(5003, 1024), (77, 64), (1, 128)])
def test_vector_add(tutorials, rng, mode, size, block):
    x, y = rng.standard_normal(size, dtype=np.float32), rng.standard_normal(size, dtype=np.float32)
    with launch_mode(mode):
        out = tutorials["01_vector_add"].add(x, y, block_size=block)
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("mode", MODES)
def test_vector_add_takes_torch_tensors(tutorials, mode):
    x, y = torch.randn(3001), torch.randn(3001)
    out = torch.empty_like(x)
    with launch_mode(mode):
        tutorials["01_vector_add"].add_kernel[(triton.cdiv(3001, 512),)](x, y, out, 3001, BLOCK_SIZE=512)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(37, 300), (5, 1), (3, 1025)])
def test_fused_softmax(tutorials, rng, mode, shape):
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    with launch_mode(mode):
        y = tutorials["02_fused_softmax"].softmax(x)
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x), dim=1).numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_fused_softmax_of_a_strided_view(tutorials, rng, mode):
    big = rng.standard_normal((40, 200), dtype=np.float32)
    x = big[::3, 7:150]  # rows 3 apart, not starting at the row's start
    with launch_mode(mode):
        y = tutorials["02_fused_softmax"].softmax(x)
    np.testing.assert_allclose(y, tutorials["02_fused_softmax"].reference(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,activation,tol", [("float16", "", 2e-3), ("float32", "leaky_relu", 1e-5)])
def test_matmul(tutorials, rng, mode, dtype, activation, tol):
    M, N, K = 91, 70, 101  # no block size divides these
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    mm = tutorials["03_matmul"]
    with launch_mode(mode):
        c = mm.matmul(a, b, activation)
    expected = torch.from_numpy(a).float() @ torch.from_numpy(b).float()
    if activation:
        expected = torch.nn.functional.leaky_relu(expected, 0.01)
    assert c.dtype == a.dtype
    np.testing.assert_allclose(c.astype("float32"), expected.numpy(), rtol=tol, atol=tol * 10)
    assert mm.matmul_kernel.best_config in mm.matmul_kernel.configs


@pytest.mark.parametrize("mode", MODES)
def test_matmul_transposed_operand(tutorials, rng, mode):
    a = rng.standard_normal((45, 33), dtype=np.float32)
    b = rng.standard_normal((50, 33), dtype=np.float32).T  # strides (1, 33)
    with launch_mode(mode):
        c = tutorials["03_matmul"].matmul(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("M,N,group", [(203, 77, 8), (5, 300, 64)])
def test_layer_norm_forward_and_backward(tutorials, rng, mode, M, N, group):
    ln = tutorials["04_layer_norm"]
    x = rng.standard_normal((M, N), dtype=np.float32)
    w, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    dy = rng.standard_normal((M, N), dtype=np.float32)
    with launch_mode(mode):
        y, mean, rstd = ln.layer_norm_forward(x, w, b, block_size=32)
        dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, group_size_m=group)
    assert_layer_norm_as_torch(x, w, b, dy, y, dx, dw, db)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_fused_attention(tutorials, rng, mode, causal, dtype):
    Z, H, N_CTX, HEAD_DIM = 2, 2, 75, 32
    q, k, v = (rng.standard_normal((Z, H, N_CTX, HEAD_DIM)).astype(dtype) for _ in range(3))
    with launch_mode(mode):
        o = tutorials["05_fused_attention"].attention(q, k, v, causal, block_m=32, block_n=16)
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(t).double() for t in (q, k, v)),
                                                            is_causal=causal)
    assert o.dtype == q.dtype
    tol = 5e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(o.astype("float64"), want.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name,sizes", [
    ("01_vector_add", {"size": 3000}), ("02_fused_softmax", {"n_rows": 20, "n_cols": 100}),
    ("03_matmul", {"M": 40, "N": 33, "K": 70}), ("04_layer_norm", {"M": 30, "N": 100}),
    ("05_fused_attention", {"Z": 1, "H": 2, "N_CTX": 40, "HEAD_DIM": 16})])
def test_tutorial_main_checks_and_prints(tutorials, capsys, name, sizes):
    with launch_mode("interpret"):
        tutorials[name].main(**sizes)
    assert "difference from NumPy" in capsys.readouterr().out


def test_tutorial_runs_as_a_script(capsys):
    with launch_mode("interpret"):
        runpy.run_path(str(TUTORIALS / "01_vector_add.py"), run_name="__main__")
    assert "vector add of 98432 float32: max abs difference from NumPy 0" in capsys.readouterr().out


def test_tutorials_use_the_ember_import():
    for path in TUTORIALS.glob("0*.py"):
        text = path.read_text()
        assert "import ember.triton as triton" in text and "import ember.triton.language as tl" in text, path
        assert "\nimport triton" not in text, path


def test_tl_is_the_language():
    assert tl.program_id is triton.language.program_id
