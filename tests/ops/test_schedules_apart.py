"""Operators and their CPU schedules live apart (ember/ops, ember/schedules/cpu): every declared
schedule names a registered operator, once; an operator without one gets the default for its
pattern kind; a declared schedule that declines a kernel gives way to the default."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ember import te
from ember.ops import all_ops
from ember.schedules import cpu
from ember.schedules.cpu import declared, schedule_for, schedules


def test_every_declared_schedule_names_an_operator():
    unknown = set(declared()) - set(all_ops())
    assert not unknown, f"schedules declared for operators that do not exist: {sorted(unknown)}"
    assert {"conv2d", "matmul", "softmax", "sum", "scaled_dot_product_attention"} <= set(declared())


def test_an_operator_has_one_schedule():
    with pytest.raises(ValueError, match="'softmax' has two CPU schedules"):
        schedules("softmax")(lambda s, outputs: None)


def loop_kinds(declined: bool | None, monkeypatch) -> list[str]:
    """The loop kinds of a (64, 32) elementwise kernel scheduled by a fake operator's schedule
    that declines (returns False) or does nothing (None), or without a declared one."""
    if declined is not None:
        monkeypatch.setitem(cpu._SCHEDULES, "fake", lambda s, outputs: False if declined else None)
    x = te.placeholder((64, 32), "float32", name="x")
    y = te.compute((64, 32), lambda i, j: x[i, j] + 1.0, name="y")
    s = te.create_schedule(y.op)
    schedule_for(SimpleNamespace(name="fake", pattern="elementwise"))(s, [y])
    return [f.kind for f in s.sch.loops_of(s[y].block)]


def test_the_default_schedule_runs_without_a_declared_one_or_when_it_declines(monkeypatch):
    default = ["parallel", "vectorized"]
    assert loop_kinds(None, monkeypatch) == default
    assert loop_kinds(True, monkeypatch) == default
    assert loop_kinds(False, monkeypatch) == ["serial", "serial"]  # it took the kernel and left it as is
