"""A sample of the hub sweep (benchmarks/hub_sweep.py): a small model of each library, built from
its definition with random weights at reduced size, compiled by ember and within 1e-4 of torch
eager (‖out − ref‖ / ‖ref‖, fp32). torchvision and timm come from their own folder (`make
hub-libs`); without it their cases skip."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import hub_libs  # noqa: E402
from benchmarks.models.hub import HUB  # noqa: E402

SAMPLE = ["tv_squeezenet1_1", "timm_resnet18", "hf_mixtral"]  # (BERT and GPT-2: tests/models/test_zoo.py)


@pytest.mark.parametrize("name", SAMPLE)
def test_hub_model_matches_eager(name):
    if HUB[name].library != "transformers" and not hub_libs.available():
        pytest.skip(f"torchvision and timm are not in {hub_libs.HUB_LIBS} (make hub-libs)")
    model, inputs = HUB[name].build(small=True)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    got = ember.compile(model, example_inputs=inputs)(*inputs).numpy()
    assert got.shape == expected.shape
    assert np.linalg.norm(got - expected) <= 1e-4 * np.linalg.norm(expected)


def test_a_layer_run_many_times_keeps_one_copy_of_its_weights():
    """ALBERT runs one layer 12 times: its weights transposed, concatenated (q, k, v) and packed once,
    not once per call (full size: 12 x 0.8 GB, which ran the machine out of memory)."""
    import transformers

    from benchmarks.models.hub import OneOutput
    from ember.frontend import import_model
    from ember.passes.pipeline import run_pipeline

    torch.manual_seed(0)
    cfg = transformers.AlbertConfig(hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
                                    intermediate_size=512, vocab_size=100, embedding_size=32)  # (packed: 128 x 512)
    cfg._attn_implementation = "eager"
    model = OneOutput(transformers.AlbertModel(cfg).eval(), ("input_ids",))
    ids = torch.randint(0, 100, (1, 8))
    graph = run_pipeline(import_model(model, example_inputs=(ids,)), opt_level=2)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(d.nbytes for d in graph.constants.values()) < 1.5 * params
    with torch.no_grad():
        expected = model(ids).numpy()
    got = ember.compile(model, example_inputs=(ids,))(ids).numpy()
    assert np.linalg.norm(got - expected) <= 1e-4 * np.linalg.norm(expected)


def test_missing_hub_libs_say_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setattr(hub_libs, "HUB_LIBS", tmp_path)
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    with pytest.raises(hub_libs.HubLibsMissing, match="make hub-libs"):
        hub_libs.load()


def test_sweep_groups_failures_by_cause():
    from benchmarks.hub_sweep import cause
    from ember.ops.registry import UnsupportedOpError

    missing = UnsupportedOpError([("aten.foo.default", "at node foo"), ("aten.foo.default: a variant", "at node f2")])
    assert cause(missing) == "unsupported: aten.foo.default"
    assert cause(ValueError("size 12 of 'x' is odd")) == cause(ValueError("size 7 of 'y' is odd"))
