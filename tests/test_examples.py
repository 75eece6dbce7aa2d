"""The tutorials run as written, and the GEMM kernel they build is real SIMD code."""

import pathlib
import runpy
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ember

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_blur_tutorial_runs_and_checks_itself(capsys, examples_dir):
    runpy.run_path(str(examples_dir / "kernels" / "blur.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "blur_x = alloc((34, 256)" in out  # a (32+2) x 256 tile per tile of blur_y
    assert "ms" in out


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump not installed")
def test_gemm_kernel_uses_vector_instructions(load_example):
    f = ember.build(*load_example("gemm").tutorial_schedule(256, 256, 256), target="c")
    assert "#pragma omp parallel for" in f.source
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f.path],
                         capture_output=True, text=True, check=True).stdout
    vector_fma = [line for line in asm.splitlines() if "vfmadd" in line or ("vmulps" in line and "mm" in line)]
    assert vector_fma, "no vector multiply in the GEMM kernel"
    assert any(reg in " ".join(vector_fma) for reg in ("%xmm", "%ymm", "%zmm"))
    a, b = np.random.rand(256, 256).astype("float32"), np.random.rand(256, 256).astype("float32")
    c = np.empty((256, 256), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)


def test_second_build_costs_no_compilation(monkeypatch, load_example):
    import ember.runtime.build as build

    ember.build(*load_example("gemm").tutorial_schedule(64, 64, 64), target="c")
    calls = []
    real_run = build.subprocess.run
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    ember.build(*load_example("gemm").tutorial_schedule(64, 64, 64), target="c")
    assert calls == []


EXAMPLE_FOLDERS = sorted({str(p.parent.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py")})


@pytest.mark.parametrize("folder", EXAMPLE_FOLDERS)
def test_a_script_run_from_its_folder_can_import_torch_dynamo(examples_dir, folder):
    """`python examples/<folder>/x.py` puts that folder first on sys.path: a folder beside the script
    named like a package torch probes for (examples/triton next to a script would be imported as
    `triton`, and torch._dynamo would then fail on `triton.language`) must not be there."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import torch._dynamo; print('ok')"
    run = subprocess.run([sys.executable, "-c", code, str(examples_dir / folder)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
