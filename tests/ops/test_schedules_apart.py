"""Operators and their CPU schedules live apart (ember/ops, ember/schedules/cpu): the operators
import nothing of the schedules; every declared schedule names a registered operator, once; an
operator without one gets the default for its pattern kind; a declared schedule that declines a
kernel gives way to the default."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from ember import te
from ember.ops import all_ops
from ember.schedules import cpu
from ember.schedules.cpu import declared, schedule_for, schedules
from ember.target import Target


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module a file imports, inside functions too, relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_operators_import_nothing_of_the_schedules():
    ops = Path(__file__).resolve().parents[2] / "ember" / "ops"
    offending = {f.name: sorted(m for m in imported_modules(f, "ember.ops") if m.startswith("ember.schedules"))
                 for f in ops.glob("*.py")}
    assert not {k: v for k, v in offending.items() if v}


def test_every_declared_schedule_names_an_operator():
    unknown = set(declared()) - set(all_ops())
    assert not unknown, f"schedules declared for operators that do not exist: {sorted(unknown)}"
    assert {"conv2d", "matmul", "softmax", "sum", "scaled_dot_product_attention"} <= set(declared())


def test_an_operator_has_one_schedule():
    with pytest.raises(ValueError, match="'softmax' has two schedules in ember.schedules.cpu"):
        schedules("softmax")(lambda s, outputs: None)


def loop_kinds(declined: bool | None, monkeypatch) -> list[str]:
    """The loop kinds of a (64, 32) elementwise kernel scheduled by a fake operator's schedule
    that declines (returns False) or does nothing (None), or without a declared one."""
    if declined is not None:
        monkeypatch.setitem(cpu.FAMILY._schedules, "fake", lambda s, outputs, target: False if declined else None)
    x = te.placeholder((64, 32), "float32", name="x")
    y = te.compute((64, 32), lambda i, j: x[i, j] + 1.0, name="y")
    s = te.create_schedule(y.op)
    schedule_for(SimpleNamespace(name="fake", pattern="elementwise"))(s, [y], Target())
    return [f.kind for f in s.sch.loops_of(s[y].block)]


def test_the_default_schedule_runs_without_a_declared_one_or_when_it_declines(monkeypatch):
    default = ["parallel", "vectorized"]
    assert loop_kinds(None, monkeypatch) == default
    assert loop_kinds(True, monkeypatch) == default
    assert loop_kinds(False, monkeypatch) == ["serial", "serial"]  # it took the kernel and left it as is
