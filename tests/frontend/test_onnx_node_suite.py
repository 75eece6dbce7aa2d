"""The ONNX backend node tests (onnx.backend.test: one small model per operator form, with inputs
and expected outputs) through the ONNX frontend and the reference evaluator.

The onnx wheel ships the generators of these tests, not their data files, so the cases are
built in memory (onnx.backend.test.case.node.collect_testcases, ~10 s). Every case runs as
ONNX generates it, in its own opset (7 to the newest). A case is skipped, with the reason, when
ember lacks the form it tests (UnsupportedOpError from a converter, an OnnxImportError such as
an unsupported dtype); an ember operator missing from the library fails. A graph input whose
value ember needs at import (a shape, axes, pads: a runtime-valued input) is read from the
case's data, and the graph specialized for it, as a compiled model does per call; so is a
sequence or optional input for the structure of its data (a sequence output compares element by
element). Outputs are compared with ONNX's tolerances for each case. `pytest -rs` lists the skips; docs/onnx.md has the
table of the reasons.
"""

import functools
import warnings

import numpy as np
import onnx
import pytest

from ember.frontend.onnx import OnnxImportError
from ember.frontend.onnx.values import graph_inputs, specialize, structured_inputs
from ember.ops import UnsupportedOpError
from ember.ops.evaluate import evaluate
from ember.runtime.specialized import flatten, group

FLOAT16_RTOL = 2**-8
BFLOAT16_RTOL = 2**-6  # two bfloat16 ulps
# cases whose expected outputs carry their generator's float32 round-off where the exact result is
# 0 (an inverse FFT of an FFT: 1.9e-7 of values up to 99), above ONNX's atol of 1e-7
ATOL = {"test_dft_inverse": 1e-6, "test_dft_inverse_opset19": 1e-6}


@functools.cache
def node_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow warnings
        return {c.name: c for c in collect_testcases() if c.kind == "node" and c.model is not None}


def _array(x) -> np.ndarray:
    """Test data is given as arrays or as TensorProtos (a list: an ONNX sequence, of those; None:
    an absent optional)."""
    if isinstance(x, list):
        return [_array(e) for e in x]
    if x is None:
        return None
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def _import(model: onnx.ModelProto, inputs: list):
    """The model imported for the case's data, and the inputs its graph takes; skips the case
    where ember lacks what it tests. A graph input whose value ember needs at import (axes, k,
    pads, a shape) is read from the case's data, and the graph specialized for it; a sequence or
    optional input is imported for the structure of its data, each of its tensors an input
    (ember.frontend.onnx.values.specialize, as ember.compile does at call time)."""
    try:
        types, kinds = graph_inputs(model), structured_inputs(model)
        given = {n: x if n in kinds else np.asarray(x).astype(t.dtype, copy=False) for (n, t), x in zip(types, inputs)}
        s = specialize(model, given)
    except UnsupportedOpError as e:
        if any(op.islower() and "." not in op for op, _ in e.missing):  # ember's operators are lower case
            raise
        pytest.skip(f"unsupported: {', '.join(sorted({op for op, _ in e.missing}))}")
    except OnnxImportError as e:
        pytest.skip(str(e).splitlines()[0])
    return s, [a for (n, _), x in zip(types, inputs) if n not in s.constant
               for a in (flatten(x) if n in kinds else [x])]


def _assert_close(name: str, case, a: np.ndarray, e: np.ndarray, what: str) -> None:
    assert a.dtype == e.dtype and a.shape == e.shape, f"{what}: {a.dtype}{a.shape} != {e.dtype}{e.shape}"
    # ONNX's tolerances, but two half-precision ulps for float16 and bfloat16: ember rounds
    # every intermediate result to 16 bits, ONNX's expected outputs are computed more precisely
    half = {"float16": FLOAT16_RTOL, "bfloat16": BFLOAT16_RTOL}.get(a.dtype.name)
    rtol = max(case.rtol, half) if half else case.rtol
    np.testing.assert_allclose(a, e, rtol=rtol, atol=ATOL.get(name, case.atol), err_msg=what)


@pytest.mark.parametrize("name", list(node_cases()))
def test_node(name):
    case = node_cases()[name]
    inputs, expected = ([_array(x) for x in xs] for xs in case.data_sets[0])
    s, inputs = _import(case.model, inputs)
    # some generators give the data as object arrays; the model's types say what they hold
    flat = evaluate(s.graph, *[np.asarray(x).astype(v.dtype, copy=False) for x, v in zip(inputs, s.graph.inputs)])
    actual = group(s.outputs, tuple(flat))
    actual = list(actual) if len(s.outputs) > 1 else [actual]
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, list) or e is None:  # a sequence, or an absent optional
            assert (a is None) == (e is None) and (e is None or len(a) == len(e)), f"output {k}: {a} != {e}"
            for j, (ai, ei) in enumerate(zip(a or [], e or [])):
                _assert_close(name, case, ai, ei, f"output {k}[{j}]")
        else:
            _assert_close(name, case, a, e, f"output {k}")
