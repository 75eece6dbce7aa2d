"""A CUDA model with symbolic sizes saved and loaded without compiling (every file checked: a
grid that is not arithmetic of the sizes, a flipped bit of a cubin refused), and profiled: each
kernel timed between events on the stream (the stand-in driver's events hold the host's times)."""

import json

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import TOL
from stand_in_driver import on_stand_in

import ember
from ember.errors import ArtifactError

pytestmark = needs_nvrtc


def test_a_saved_cuda_model_loads_without_compiling_and_runs_at_each_size(symbolic_mlp, host_driver, tmp_path):
    model, cm = symbolic_mlp
    folder = cm.save(tmp_path / "mlp")
    loaded = ember.load(folder)
    assert type(loaded) is type(cm) and loaded.spec == cm.spec
    for name, k in loaded._entry.kernels.items():
        original = cm._entry.kernels[name]
        assert k.binary == original.binary and k.to_json() == original.to_json() and k.source == original.source
        k.func = original.func  # the stand-in interprets the loop IR, which a saved model does not keep
    rng = np.random.default_rng(6)
    for batch in (2, 7, 2):
        x = rng.standard_normal((batch, 16), np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(loaded(x), model(torch.from_numpy(x)).numpy(), rtol=TOL, atol=TOL)
    text = (folder / "manifest.json").read_text()
    manifest = json.loads(text)
    manifest["kernel_launches"][0]["grid"]["symbolic"]["blockIdx.x"] = [["__import__('os').getpid() +", 1, 2]]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="is not a grid extent"):  # only ints, sizes and arithmetic
        ember.load(folder)
    (folder / "manifest.json").write_text(text)
    cubin = next((folder / "kernels").glob("*.cubin"))
    data = cubin.read_bytes()
    cubin.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # one bit flipped
    with pytest.raises(ArtifactError, match=f"{cubin.name}"):
        ember.load(folder)


def test_profile_times_each_kernel_between_events_on_the_stream(symbolic_mlp, host_driver):
    _, cm = symbolic_mlp
    on_stand_in(cm)
    x = np.random.default_rng(7).standard_normal((4, 16), np.float32)
    prof = cm.profile(x, repeat=3)  # the stand-in's events hold the host's times (kernels interpreted)
    assert [k.name for k in prof.kernels] == [k.name for k in cm.kernels]
    assert all(k.calls == 1 and k.median_us > 0 for k in prof.kernels)
    assert prof.total_us >= sum(k.median_us for k in prof.kernels) * 0.5 and prof.repeat == 3
    assert host_driver.graph_launches == 0 and cm._marks is None
    assert f"{prof.total_us:.1f} us per run (median of 3 profiled runs)" in cm.summary()
