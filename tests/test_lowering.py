"""One lowering path: the compiler and the tuner cut a graph the same way (ember.lowering), a
tuned schedule reaches the compiled kernel through a lookup, each group's te is built once, and
the tuning package does not import the compiler."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.lowering
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.lowering import Workload, lower_workload, partition, workload_of
from ember.ops.nodes import add_op
from ember.target import Target
from ember.testing import random_array
from ember.tir.structural import structural_equal
from ember.tune import Database, MeasureResult
from ember.tune.extract import extract_tasks
from ember.tune.space import design_space, sample

RTOL, ATOL = 1e-4, 1e-4


def mlp() -> tuple[Graph, object]:
    """relu(x @ w1) @ w2 + x @ w1: two matmuls, the second with a residual epilogue."""
    g = Graph("mlp")
    x = g.add_input("x", TensorType((8, 32)))
    w1, w2 = random_array((32, 32)), random_array((32, 32))
    (h,) = add_op(g, "matmul", [x, g.add_constant(w1, "w1")])
    (r,) = add_op(g, "relu", [h])
    (y,) = add_op(g, "matmul", [r, g.add_constant(w2, "w2")])
    g.set_outputs(add_op(g, "add", [y, h]))
    return g, lambda x: np.maximum(x @ w1, 0) @ w2 + x @ w1


def test_workloads_are_plain_hashable_data():
    g, _ = mlp()
    fused = partition(g)
    workloads = [workload_of(grp) for grp in fused.groups]
    assert all(isinstance(w, Workload) for w in workloads)
    assert len(set(workloads)) == len(workloads) and all(w.static for w in workloads)
    assert [w.name for w in workloads] == ["gemm", "relu_gemm_add"]  # relu fused as the prologue
    assert workloads == [workload_of(grp) for grp in partition(mlp()[0]).groups]  # a fresh graph, the same data


def test_tasks_are_the_kernels_the_compiler_builds():
    g, _ = mlp()
    tasks = extract_tasks(g)
    kernels = compile_graph(mlp()[0]).kernels
    assert {t.name for t in tasks} <= {k.name.rsplit("_", 1)[0] for k in kernels}
    assert sum(t.weight for t in tasks) == len(kernels)


def test_a_tuned_schedule_reaches_the_kernel_and_te_is_built_once(tmp_path, monkeypatch):
    g, ref = mlp()
    [task, *_] = extract_tasks(g)
    sch = sample(task, design_space(task)[0], seed=3)
    db = Database(tmp_path / "t.db")
    db.commit_workload(task, Target().key)
    db.add(task.key, Target().key, sch.trace, MeasureResult((1e-9,), None))
    schedules = db.schedules(Target().key)
    assert set(schedules.traces) == {task.key}
    assert schedules("no such key") is None

    built = []
    group_kernel = ember.lowering.group_kernel
    monkeypatch.setattr(ember.lowering, "group_kernel", lambda *a, **k: built.append(1) or group_kernel(*a, **k))
    tuned = compile_graph(g, database=db, jobs=1)
    assert len(built) == tuned.stats.lowered  # one te per distinct workload, tuned or not
    plain = compile_graph(g, jobs=1)
    assert tuned.source != plain.source
    x = random_array((8, 32))
    np.testing.assert_allclose(tuned(x), ref(x), rtol=RTOL, atol=ATOL)

    # the same kernel through the lookup by itself, in worker processes too
    by_lookup = compile_graph(g, schedules=schedules, jobs=2)
    assert by_lookup.source == tuned.source
    [w] = [workload_of(grp) for grp in partition(g).groups if workload_of(grp).name == task.name]
    assert structural_equal(lower_workload(w, schedules), lower_workload(w, schedules))
    assert not structural_equal(lower_workload(w, schedules), lower_workload(w))


def test_database_and_schedules_together_are_refused():
    with pytest.raises(ember.errors.ArgumentTypeError, match="database or its schedules"):
        compile_graph(mlp()[0], database=Database(":memory:"), schedules=lambda key: None)


def test_the_tuner_does_not_import_the_compiler():
    root = Path(ember.__file__).parent
    for path in [*sorted((root / "tune").glob("*.py")), root / "lowering.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not any(n == "compiler" or n.endswith(".compiler") for n in names), \
                    f"{path.name} imports the compiler"
