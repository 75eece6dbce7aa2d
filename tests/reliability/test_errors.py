"""Every error ember raises on purpose is an EmberError, so `except ember.EmberError` catches all
of them, and each keeps the builtin base a caller may already catch (ValueError, TypeError)."""

import numpy as np
import pytest

import ember
from ember import te
from ember.graph.core import GraphError
from ember.te.tensor import TEError
from ember.tir.dtype import DTypeError, check


@pytest.mark.parametrize("cls, builtin", [(GraphError, ValueError), (TEError, ValueError), (DTypeError, TypeError),
                                          (ember.ConfigError, ValueError), (ember.ArtifactError, ValueError),
                                          (ember.ArgumentTypeError, TypeError), (ember.ShapeError, ValueError)])
def test_error_classes_are_ember_errors(cls, builtin):
    assert issubclass(cls, ember.EmberError) and issubclass(cls, builtin)


def test_misuse_is_an_ember_error():
    with pytest.raises(ember.ArgumentTypeError, match="takes a Graph, a torch.nn.Module, or an ONNX model"):
        ember.compile(42)
    with pytest.raises(DTypeError):
        check("float7")
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.ConfigError, match="unknown target 'tpu'"):
        ember.build(s, [A, B], target="tpu")
    with pytest.raises(ember.ArgumentTypeError, match="needs its arguments"):
        ember.lower(s)
    f = ember.build(s, [A, B])
    with pytest.raises(ember.ConfigError, match="repeat and number"):
        ember.bench(f, np.random.rand(8).astype("float32"), np.empty(8, "float32"), repeat=0)


# builtin exceptions ember still raises, per file, and why they are not EmberErrors: raised and
# caught inside ember (turned into an EmberError where they leave it), or a broken invariant of
# ember's own code (a bug to report, not a user's mistake)
BUILTIN_RAISES = {
    "dims.py": (3, "the dimension parser's own signals, caught by parse: a string that is no expression is a symbol"),
    "config.py": (19, "each value check raises ValueError, which get/resolve turn into ConfigError"),
    "runtime/tensor_file.py": (7, "the weights reader's checks, turned into ArtifactError by the artifact reader"),
    "cuda/grid.py": (1, "a saved grid extent of other operators, made ArtifactError by the CUDA artifact reader"),
    "codegen/cstyle.py": (1, "a node the renderer does not know (compiler bug)"),
    "codegen/c.py": (1, "two kernels of one name (compiler bug)"),
    "program.py": (1, "a reference of an unknown kind in the call program (compiler bug)"),
    "codegen/python.py": (1, "a node the interpreter does not know (compiler bug)"),
    "tir/functor.py": (1, "a node the visitor does not know (compiler bug)"),
    "tir/expr_functor.py": (1, "a node the visitor does not know (compiler bug)"),
    "tir/arith_linear.py": (1, "a node the simplifier does not know (compiler bug)"),
    "tir/arith_rewrite.py": (1, "a node the simplifier does not know (compiler bug)"),
    "tir/transform/simplify_stmt.py": (1, "a node the simplifier does not know (compiler bug)"),
    "tir/expr.py": (3, "expression construction: KeyError/TypeError as Python's own operators raise them"),
    "graph/core.py": (1, "Attrs mapping protocol (KeyError)"),
    "ops/registry.py": (2, "an operator declared twice or with an unknown pattern (a bug in ember's operator library)"),
    "schedules/family.py": (1, "two schedules declared for one operator (a bug in the library)"),
    "runtime/disk_cache.py": (1, "a path counted in no cache folder of ember's (a bug in ember's caches)"),
    "frontend/onnx/registry.py": (1, "two converters for one ONNX op (a bug in the library)"),
    "frontend/torch/registry.py": (1, "two handlers for one ATen op (a bug in the library)"),
    "passes/fold_constants.py": (1, "an operator's reference disagreeing with its type inference (a bug)"),
    "passes/plan_memory.py": (2, "plan invariants (bugs)"),
    "passes/rewrite.py": (1, "a rewrite reading a value it has not made (a bug in a pass)"),
    "tune/cost_model.py": (4, "mismatched arrays handed to the cost model (a bug in the tuner)"),
    "tune/database.py": (1, "a workload without records (KeyError, the mapping protocol)"),
    "tune/features.py": (1, "an access the featurizer cannot read (a bug in the tuner)"),
    "tune/scheduler.py": (1, "every task excluded (a bug in the tuner)"),
}


def test_builtin_exceptions_are_only_where_listed():
    """Every error raised for a user's input is an EmberError; the builtin ones left are listed above."""
    import re
    from pathlib import Path

    root = Path(ember.__file__).parent
    pattern = re.compile(r"raise (ValueError|TypeError|RuntimeError|KeyError|NotImplementedError|IndexError)\(")
    found = {}
    for path in sorted(root.rglob("*.py")):
        n = len(pattern.findall(path.read_text()))
        if n:
            found[path.relative_to(root).as_posix()] = n
    assert found == {k: n for k, (n, _) in BUILTIN_RAISES.items()}


def test_a_compiled_model_is_named_once_in_its_errors():
    """A model of the default name said "model model takes 1 input(s)"; its name is quoted, as an
    input's is."""
    from ember.graph import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph("g")
    g.set_outputs(add_op(g, "relu", [g.add_input("x", TensorType((2, 3)))]))
    cm = ember.compile(g)
    x = np.random.default_rng().standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(ember.ArgumentTypeError, match=r"^model 'model' takes 1 input\(s\) \(x\), got 2$"):
        cm(x, x)
    with pytest.raises(ember.ArgumentTypeError, match=r"^input 'x' has dtype float64, expected float32$"):
        cm(x.astype(np.float64))
