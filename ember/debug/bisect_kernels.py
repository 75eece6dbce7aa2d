"""Finding the kernel at fault: which kernel's generated C disagrees with its loop IR.

    result = bisect_kernels("model.onnx")   # or a Graph, or a torch.nn.Module with example_inputs
    print(result)                           # every kernel call's error, then the verdict
    result.culprit                          # "conv2d_add_relu_3", say, or None
    result.repro                            # the folder of the culprit's self-contained repro

The model is compiled as for C (the same passes, kernels and SIMD width), but run on the loop-IR
interpreter (target "python", ember.runtime.interpreted), which defines what each kernel
computes; the kernels are also built by the C target's backend (ember.backends.c, as single
kernels: what the model's unit renders). Every call, in run order, runs on the interpreter
and, on copies of the same arguments, in C; the first call whose outputs differ beyond
tolerance (numpy.allclose(c, interpreted, rtol, atol, equal_nan=True)) names the culprit,
whatever the later calls do (they read the interpreter's values, so one wrong kernel does not
make all that follow it wrong).

The culprit's repro goes to `folder` (default: a new temporary folder): its loop IR
(kernel.tir), the C it was built from (kernel.c), its interpreter code (kernel.py), its arguments
before the call (inputs.npz: arg0, arg1, ... flat, and the size arguments), what the interpreter
wrote (expected.npz) and what C wrote (got.npz), and repro.py, which compiles kernel.c with the
compiler and flags of the build, calls the kernel on inputs.npz and prints each output's largest
error against expected.npz: a bug report that needs nothing but a C compiler and NumPy.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..codegen.c import kernel_symbol
from ..codegen.python import codegen_python
from ..compiler import compile_graph
from ..frontend import import_model
from ..passes.pipeline import PIPELINES
from ..target import Target
from .bisect import _compare, random_inputs


@dataclass(frozen=True)
class KernelTrial:
    """One kernel call: its kernel, the nodes it computes, and how far C's outputs are from the
    interpreter's (inf for NaNs in different places)."""

    index: int
    kernel: str
    nodes: str
    max_error: float
    ok: bool

    def __str__(self):
        verdict = "ok" if self.ok else "WRONG"
        return f"  [{verdict}] #{self.index:<3} {self.kernel:<32} max abs error {self.max_error:.3g}"


@dataclass(frozen=True)
class KernelBisectResult:
    trials: tuple[KernelTrial, ...]  # every call, in run order
    repro: Path | None  # the culprit's repro folder
    rtol: float
    atol: float

    @property
    def culprit(self) -> str | None:
        """The kernel of the first call whose C outputs differ from the interpreter's, or None."""
        return next((t.kernel for t in self.trials if not t.ok), None)

    def __str__(self):
        lines = [f"each kernel in C against the loop-IR interpreter; tolerance rtol={self.rtol:g}, atol={self.atol:g}",
                 *map(str, self.trials)]
        if self.culprit is None:
            lines.append("verdict: every kernel's C agrees with its loop IR")
        else:
            first = next(t for t in self.trials if not t.ok)
            lines.append(f"verdict: kernel {self.culprit!r} (call #{first.index}: {first.nodes}) is the first whose C "
                         f"disagrees with its loop IR; repro in {self.repro}")
        return "\n".join(lines)


def bisect_kernels(model, example_inputs: Sequence | None = None, *, rtol: float = 1e-4, atol: float = 1e-4,
                   opt_level: int = max(PIPELINES), folder: str | Path | None = None) -> KernelBisectResult:
    """Run every kernel of `model` (a Graph, an ONNX model path or ModelProto, or a torch.nn.Module
    with example_inputs) in C and on the interpreter; see the module doc."""
    graph = import_model(model, None if example_inputs is None else tuple(example_inputs), "ember.debug.bisect_kernels")
    inputs = list(example_inputs) if example_inputs is not None else random_inputs(graph)
    c = Target()
    interpreted = compile_graph(graph, opt_level=opt_level, target=Target("python", vector_bytes=c.vector_bytes),
                                name="bisect")
    entry = interpreted._entry
    built = c.backend.build_kernels(list(entry.funcs.values()), c, checked=False)
    trials: list[KernelTrial] = []
    repro: list[Path] = []

    def run_call(call, arrays, sizes):
        copies = [a.copy() for a in arrays]
        before = [a.copy() for a in arrays]
        built[call.kernel]._launcher(copies, sizes)()
        entry.interpret(call, arrays, sizes)
        outs = range(len(arrays) - call.outputs, len(arrays))
        error, ok = _compare([copies[k] for k in outs], [arrays[k] for k in outs], rtol, atol)
        trials.append(KernelTrial(len(trials), call.kernel, call.comment, error, ok))
        if not ok and not repro:
            where = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="ember-bisect-"))
            repro.append(_write_repro(where, entry.funcs[call.kernel], built[call.kernel].source, before, sizes,
                                      {k: arrays[k] for k in outs}, {k: copies[k] for k in outs}, c))

    entry.run_call = run_call
    try:
        interpreted(*inputs)
    finally:
        entry.run_call = entry.interpret
    return KernelBisectResult(tuple(trials), repro[0] if repro else None, rtol, atol)


def _write_repro(folder: Path, func, c_source: str, before: list[np.ndarray], sizes: list[int],
                 expected: dict[int, np.ndarray], got: dict[int, np.ndarray], target: Target) -> Path:
    """The culprit's self-contained repro (see the module doc)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.tir").write_text(f"{func}\n")
    (folder / "kernel.c").write_text(c_source)
    (folder / "kernel.py").write_text(codegen_python(func))
    np.savez(folder / "inputs.npz", **{f"arg{k}": a for k, a in enumerate(before)}, sizes=np.array(sizes, np.int64))
    np.savez(folder / "expected.npz", **{f"arg{k}": a for k, a in expected.items()})
    np.savez(folder / "got.npz", **{f"arg{k}": a for k, a in got.items()})
    settings = {"symbol": kernel_symbol(func.name), "cc": target.cc, "cflags": target.cflags, "args": len(before),
                "outputs": sorted(expected)}
    (folder / "repro.py").write_text(_REPRO.replace("SETTINGS", json.dumps(settings)))
    return folder


_REPRO = '''"""Repro of one kernel whose C disagrees with its loop IR (written by ember.debug.bisect_kernels).

    python repro.py     # builds kernel.c, runs the kernel on inputs.npz, compares with expected.npz
"""
import ctypes
import json
import shlex
import subprocess
from pathlib import Path

import numpy as np

here = Path(__file__).resolve().parent
settings = json.loads(\'\'\'SETTINGS\'\'\')
library = here / "kernel.so"
subprocess.run([*shlex.split(settings["cc"]), *shlex.split(settings["cflags"]), "-o", str(library),
                str(here / "kernel.c"), "-lm"], check=True)
kernel = getattr(ctypes.CDLL(str(library)), settings["symbol"])
inputs, expected = np.load(here / "inputs.npz"), np.load(here / "expected.npz")
args = [inputs[f"arg{k}"].copy() for k in range(settings["args"])]
kernel.argtypes = [ctypes.c_void_p] * len(args) + [ctypes.c_int64] * len(inputs["sizes"])
kernel(*[a.ctypes.data for a in args], *[int(s) for s in inputs["sizes"]])
for k in settings["outputs"]:
    want = expected[f"arg{k}"]
    with np.errstate(invalid="ignore"):
        error = np.abs(args[k].astype(np.float64) - want.astype(np.float64)).max(initial=0.0)
    print(f"argument {k}: max abs error {error:.3g}")
'''
