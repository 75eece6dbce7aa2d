"""A saved model's manifest records the extensions its library's code needs (ember.runtime.isa),
not every one its -march enables: a float32 model built for a target with AVX512-BF16 and VNNI
loads on a machine without them (forced: the machine's features patched), one whose kernels use
vdpbf16ps is refused there with the extension named; without objdump, every extension stays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import ember
from ember.errors import ArtifactError
from ember.runtime import artifact, isa
from ember.target import Target, machine_features

UNITS = {"avx512bf16", "avx512vnni"}
# x86-64-v4 (AVX-512 F/BW/VL/DQ) with the two units: what a Zen 4 or 5 or a Xeon's -march=native enables
TARGET = Target.x86("avx512", cflags="-O2 -mavx512bf16 -mavx512vnni -fopenmp -shared -fPIC -std=gnu11")

needs_units = pytest.mark.skipif(not (machine_features() or set()) >= UNITS,
                                reason="builds for AVX512-BF16 and VNNI, which this machine lacks")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small MLP saved in float32 and in bf16 for TARGET, with an input and torch's output."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        ref = model(x).numpy()
    root = tmp_path_factory.mktemp("isa")
    paths = {p: ember.compile(model, (x,), precision=p, target=TARGET).save(root / p) for p in ("fp32", "bf16")}
    return paths, x.numpy(), ref


def features(path) -> set[str]:
    return set(json.loads((path / "manifest.json").read_text())["target"]["features"])


def without(monkeypatch, lacking: set[str]) -> None:
    """This machine as the loader sees it, less `lacking`."""
    have = machine_features() - lacking
    monkeypatch.setattr(artifact, "machine_features", lambda: have)


@needs_units
def test_float32_model_loads_without_the_units(saved, monkeypatch):
    paths, x, ref = saved
    assert TARGET.features >= UNITS and not features(paths["fp32"]) & UNITS
    assert {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma"} <= features(paths["fp32"])
    without(monkeypatch, UNITS)
    np.testing.assert_allclose(ember.load(paths["fp32"])(x), ref, rtol=1e-4, atol=1e-4)


@needs_units
def test_bf16_model_needs_avx512bf16(saved, monkeypatch):
    paths, x, ref = saved
    assert "avx512bf16" in features(paths["bf16"]) and "avx512vnni" not in features(paths["bf16"])
    without(monkeypatch, {"avx512vnni"})
    out = ember.load(paths["bf16"])(x)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) <= 1e-2
    without(monkeypatch, {"avx512bf16"})
    with pytest.raises(ArtifactError, match="built for a machine with avx512bf16, which this one lacks"):
        ember.load(paths["bf16"])


@needs_units
def test_without_objdump_every_feature_stays(saved, monkeypatch):
    paths, _, _ = saved
    library = str(paths["fp32"] / "model.so")
    assert not set(isa.needed_features(library, TARGET.features)) & UNITS
    monkeypatch.setattr(isa.shutil, "which", lambda name: None)
    isa._unit_mnemonics.cache_clear()  # (what it read of the library before, objdump present)
    try:
        assert isa.needed_features(library, TARGET.features) == sorted(TARGET.features)
    finally:
        isa._unit_mnemonics.cache_clear()


@pytest.mark.parametrize("mnemonic, unit", [
    ("vpdpbusd", "avx512vnni"), ("vpdpwssds", "avx512vnni"), ("vdpbf16ps", "avx512bf16"),
    ("vcvtneps2bf16", "avx512bf16"), ("vaddph", "avx512fp16"), ("vfmadd231ph", "avx512fp16"),
    ("vmovsh", "avx512fp16"), ("vcvtph2psx", "avx512fp16"), ("vcvtss2sh", "avx512fp16"), ("vmovw", "avx512fp16"),
    ("tileloadd", "amx-tile"), ("ldtilecfg", "amx-tile"), ("tdpbf16ps", "amx-bf16"), ("tdpbusd", "amx-int8"),
    ("vcvtph2ps", None), ("vcvtps2ph", None), ("vpshufhw", None), ("vfmadd231ps", None), ("vpmaddwd", None),
])
def test_unit_instructions(mnemonic, unit):
    """Each unit's instructions name it, and only it; F16C's conversions and plain AVX-512 none."""
    line = f"  1139:\t{mnemonic} %zmm1,%zmm2,%zmm3\n".encode()
    if unit is not None:  # (the listing's scan keeps it)
        assert isa._CANDIDATE.findall(line) == [mnemonic.encode()]
    named = [u for u, pattern in isa.UNIT_INSTRUCTIONS.items() if pattern.fullmatch(mnemonic)]
    assert named == ([unit] if unit else [])
