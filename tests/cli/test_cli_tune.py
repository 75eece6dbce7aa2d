"""`ember tune`: a small ONNX model tuned into a database, the report and its plot, and
`ember compile --db` using the records."""

import numpy as np
import pytest

import ember
from ember.cli import main


@pytest.fixture
def onnx_model(save_onnx):
    w = np.random.default_rng(0).standard_normal((32, 16)).astype("float32")
    return save_onnx([4, 32], [4, 16], {"w": w}), w


def test_tune_report_and_compile_with_the_database(onnx_model, tmp_path, capsys):
    path, w = onnx_model
    db = tmp_path / "tuning.db"
    assert main(["tune", str(path), "--trials", "4", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "estimated model latency" in out
    assert main(["tune", "--report", str(db)]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "tuning curves:" in out
    assert (tmp_path / "tuning_curve.png").read_bytes()[:4] == b"\x89PNG"
    artifact = tmp_path / "model.ember"
    assert main(["compile", str(path), "--db", str(db), "-o", str(artifact)]) == 0
    x = np.random.default_rng(1).standard_normal((4, 32)).astype("float32")
    np.testing.assert_allclose(ember.load(artifact)(x), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_tune_needs_a_model_or_a_report(tmp_path):
    with pytest.raises(SystemExit, match="give a model"):
        main(["tune"])
    with pytest.raises(SystemExit, match="no such tuning database"):
        main(["tune", "--report", str(tmp_path / "missing.db")])
