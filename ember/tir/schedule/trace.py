"""Traces: the list of schedule instructions that turned an unscheduled function into this one.

An instruction is plain data: its kind (a primitive's name), its inputs (names of loop and block
handles, or lists of them), its attributes (numbers, strings, lists) and its outputs (names of
the handles it created). A trace serializes to JSON, prints as the Python that a user would write,
and replays on a fresh schedule of the same function, rebuilding the same function (the tuner
searches over traces and the tuning database stores them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ...errors import ScheduleError
from .registry import PRIMITIVES


@dataclass(frozen=True)
class Instruction:
    kind: str
    inputs: tuple[tuple[str, object], ...]  # (parameter, handle name or tuple of names); "*p": varargs
    attrs: tuple[tuple[str, object], ...]
    outputs: tuple[str, ...]

    def as_python(self) -> str:
        args = []
        for k, (pname, value) in enumerate(self.inputs):
            if pname.startswith("*"):
                args += list(value)
            else:
                args.append(_py_input(value) if k == 0 else f"{pname}={_py_input(value)}")
        args += [f"{k}={v!r}" for k, v in self.attrs]
        call = f"sch.{self.kind}({', '.join(args)})"
        if not self.outputs:
            return call
        prim = PRIMITIVES.get(self.kind)  # None: a kind this ember does not know (replay says so)
        if len(self.outputs) == 1 and not (prim and prim.returns_list):
            return f"{self.outputs[0]} = {call}"
        lhs = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "")
        return f"{lhs} = {call}"

    def as_json(self) -> list:
        return [self.kind, [[p, list(v) if isinstance(v, tuple) else v] for p, v in self.inputs],
                {k: _jsonable(v) for k, v in self.attrs}, list(self.outputs)]

    @staticmethod
    def from_json(obj) -> Instruction:
        kind, inputs, attrs, outputs = obj
        return Instruction(kind, tuple((p, tuple(v) if isinstance(v, list) else v) for p, v in inputs),
                           tuple((k, _unjson(v)) for k, v in attrs.items()), tuple(outputs))


def _py_input(i) -> str:
    if isinstance(i, tuple):
        return "[" + ", ".join(i) + "]"
    return str(i)


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def _unjson(v):
    if isinstance(v, list):
        return tuple(_unjson(x) for x in v)
    return v


@dataclass
class Trace:
    instructions: list[Instruction] = field(default_factory=list)

    def append(self, inst: Instruction) -> None:
        self.instructions.append(inst)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self):
        return iter(self.instructions)

    def as_python(self) -> str:
        return "\n".join(i.as_python() for i in self.instructions)

    __str__ = as_python

    def to_json(self) -> str:
        return json.dumps([i.as_json() for i in self.instructions])

    @staticmethod
    def from_json(text: str) -> Trace:
        return Trace([Instruction.from_json(o) for o in json.loads(text)])

    def decisions(self) -> dict[int, object]:
        """{instruction index: decision} of the sampling instructions."""
        return {k: dict(i.attrs)["decision"] for k, i in enumerate(self.instructions) if "decision" in dict(i.attrs)}

    def with_decision(self, index: int, decision) -> Trace:
        """This trace with the decision of instruction `index` replaced (None: sample it anew
        when replayed); replaying it rebuilds the schedule that decision gives."""
        inst = self.instructions[index]
        attrs = tuple((k, _unjson(_jsonable(decision)) if k == "decision" else v) for k, v in inst.attrs)
        new = list(self.instructions)
        new[index] = Instruction(inst.kind, inst.inputs, attrs, inst.outputs)
        return Trace(new)

    def apply_to(self, sch) -> None:
        """Replay every instruction on `sch` (a fresh Schedule of the same function)."""
        names: dict[str, object] = {}

        def resolve(i):
            if isinstance(i, tuple):
                return [names[x] for x in i]
            return names[i]

        for inst in self.instructions:
            result = sch.apply(inst.kind, [(p, resolve(v)) for p, v in inst.inputs], dict(inst.attrs))
            outs = result if isinstance(result, list | tuple) else ([] if result is None else [result])
            if len(outs) != len(inst.outputs):
                raise ScheduleError(f"replaying {inst.kind}: expected {len(inst.outputs)} results, got {len(outs)}")
            names.update(zip(inst.outputs, outs))
