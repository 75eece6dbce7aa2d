"""The layering contract of docs/design.md ("Layers and folders"), checked by reading every
module's imports with `ast` (imports inside functions count: they run too, only later).

- A ground layer (errors, config, dtypes, the target description) that anything may import.
- Who may import whom: LAYERS below, an arrow reads "imports", and a layer may also import what
  the layers it imports may (nothing imports upward). `tir` imports nothing of ember but the
  ground layer.
- No import cycle between ember's packages (and top-level modules), nor between its modules:
  every import counts, those inside functions too; only imports under `if TYPE_CHECKING:`, which
  never run (annotations), are left out of the module cycles.

Where today's code breaks the contract, EXCEPTIONS names the import and why, and CYCLES the
modules of a cycle and why; one that no longer occurs fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

EMBER = Path(__file__).resolve().parent.parent / "ember"

# modules anything may import (they import only each other)
# (ember.backends is the registry of backends only, which the Target names; the backends
# themselves, ember.backends.<name>, are the `backends` layer)
GROUND = {"ember.errors", "ember.config", "ember.target", "ember.tir.dtype", "ember.version", "ember.dims",
          "ember.backends"}

# a package (ember/<name>/) or top-level module (ember/<name>.py) -> what it may import directly
LAYERS: dict[str, set[str]] = {
    "tir": set(),  # expressions, loop IR, schedules, loop passes
    "te": {"tir"},  # tensor expressions become loop-IR functions
    "program": set(),  # the call program: launches, copies, control flow over the plan's buffers
    "codegen": {"tir", "program"},  # loop IR and call programs to source text; the loop-IR interpreter
    "runtime": {"codegen", "tir"},  # build, load, call
    "cuda": {"codegen", "runtime", "te", "intrinsics"},  # the CUDA target: CUDA C, NVRTC, the driver API, GPU schedules
    "kernel": {"te", "runtime"},  # ember.lower / ember.build of one te schedule (by the target's backend)
    "intrinsics": {"te"},  # tensor intrinsics of real hardware (VNNI), declared through te
    "accel": {"codegen", "runtime", "te", "kernel"},  # a simulated accelerator (kernel: its tuner builds candidates)
    "testing": {"kernel", "schedules"},  # a schedule or an operator against NumPy on every target
    "graph": set(),  # graph IR data structures only
    "ops": {"graph", "te", "intrinsics"},  # what each operator is, in both worlds (a unit's packed layout)
    "schedules": {"ops", "cuda"},  # schedules of the operators, per target
    "frontend": {"graph", "ops", "checks"},
    "passes": {"graph", "ops", "program"},
    "checks": {"graph", "ops"},  # compile-time checks of a model and its inputs
    "workers": set(),  # ember's own worker processes
    "lowering": {"passes", "kernel", "schedules", "workers"},  # a graph partition to loop-IR functions
    "tune": {"kernel", "lowering", "workers", "frontend"},  # task extraction imports models
    "compile_stats": {"passes", "runtime"},  # where a compile's time went: CompileStats, Clock
    "compile_module": {"compile_stats", "frontend"},  # a torch module through the model cache
    "compiler": {"compile_module", "frontend", "checks", "tune", "lowering", "workers", "testing"},  # the driver
    "torch_backend": {"compiler"},  # the torch.compile backend: compiles what the frontend imports
    "triton": {"kernel", "tune"},  # the tile language: kernels to loop IR and C, their autotuner
    # one per target kind, found through the registry (target.backend)
    "backends": {"runtime", "passes", "tune", "cuda", "triton", "accel"},  # (triton: the CPU's tile-kernel Emitter)
    # ember.quantize: calibration, the int8 rewrite, then the compiler (accel: its products offloaded)
    "quantization": {"compiler", "accel"},
    "ember": {"compiler", "quantization"},  # the package itself: the public API
    "debug": {"ember"},  # bisect, draw
    "cli": {"debug", "cuda"},  # the `ember` command (ember doctor asks ember.cuda for NVRTC and the GPU)
}

# (importing module, imported module) -> why it is allowed for now
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("ember.runtime.model", "ember.checks"):
        "CompiledModel converts and checks its inputs with the compile-time checks; that input "
        "conversion belongs in runtime",
    ("ember.checks", "ember.passes.plan_memory"):
        "the memory check reads the memory plan's sizes",
    ("ember.runtime.artifact", "ember.graph.serialize"):
        "an artifact stores the model's graph; serialization of graphs below runtime, or the "
        "artifact above graph, would remove it",
    ("ember.tune.task", "ember.kernel"): "tasks are built from te schedules the way ember.build is",
}


# the modules of an import cycle (a strongly connected component of the module import graph) ->
# why it is there for now
CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(EMBER.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in EMBER.rglob("*.py")}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _walk(node: ast.AST, typing: bool):
    """ast.walk, leaving out the bodies of `if TYPE_CHECKING:` unless `typing`."""
    for child in ast.iter_child_nodes(node):
        if not typing and _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _walk(other, typing)
            continue
        yield child
        yield from _walk(child, typing)


@cache
def _imports(name: str, typing: bool = True) -> frozenset[str]:
    """The ember modules `name` imports anywhere in its file (a name imported from a package is
    its submodule when there is one, else the package); `typing` False: not those imported only
    for annotations (under `if TYPE_CHECKING:`)."""
    path = _modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _walk(ast.parse(path.read_text(), str(path)), typing):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found |= {f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in _modules() else prefix for a in node.names}
    return frozenset(m for m in found if m == "ember" or m.startswith("ember."))


def _layer(module: str) -> str:
    """GROUND, or the package / top-level module of ember that `module` belongs to."""
    if module in GROUND:
        return "GROUND"
    parts = module.split(".")
    return "ember" if len(parts) == 1 else parts[1]


@cache
def _below(layer: str) -> frozenset[str]:
    """Everything `layer` may import: what LAYERS allows, and what those may, recursively."""
    out = set(LAYERS[layer])
    for other in LAYERS[layer]:
        out |= _below(other)
    return frozenset(out)


def _edges(with_exceptions: bool = False) -> dict[tuple[str, str], set[str]]:
    """(importing layer, imported layer) -> the module imports behind it, EXCEPTIONS left out
    unless asked for."""
    edges = defaultdict(set)
    for name in _modules():
        for target in _imports(name):
            if (name, target) in EXCEPTIONS and not with_exceptions:
                continue
            a, b = _layer(name), _layer(target)
            if a != b:
                edges[a, b].add(f"{name} imports {target}")
    return edges


def test_every_package_has_a_place_in_the_table():
    unknown = sorted({_layer(m) for m in _modules()} - set(LAYERS) - {"GROUND"})
    assert not unknown, f"add {unknown} to LAYERS in tests/test_layers.py (and to docs/design.md)"


def test_ground_imports_only_ground():
    bad = sorted(f"{m} imports {t}" for m in GROUND for t in _imports(m)
                 if t not in GROUND and (m, t) not in EXCEPTIONS)
    assert not bad, "\n".join(bad)


def test_tir_imports_only_the_ground_layer():
    bad = sorted(f"{m} imports {t}" for m in _modules() if _layer(m) == "tir"
                 for t in _imports(m) if _layer(t) not in ("tir", "GROUND"))
    assert not bad, "\n".join(bad)


def test_nothing_imports_upward():
    bad = sorted(why for (a, b), whys in _edges().items()
                 if a != "GROUND" and b != "GROUND" and b not in _below(a) for why in whys)
    assert not bad, "imports the layer table does not allow:\n" + "\n".join(bad)


def _components(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan): each an import cycle,
    or several sharing nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    return "; ".join(f"{a} imports {', '.join(sorted(graph[a] & component))}" for a in sorted(component))


def test_no_import_cycle_between_packages():
    """Every import counts here, the listed exceptions too: none of them closes a cycle."""
    graph = defaultdict(set)
    for a, b in _edges(with_exceptions=True):
        graph[a].add(b)
    cycles = [_describe(c, graph) for c in _components(graph)]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def _module_graph() -> dict[str, set[str]]:
    return {m: set(_imports(m, typing=False)) - {m} for m in _modules()}


def test_no_import_cycle_between_modules():
    """Imports inside functions count (they run too, only later): a cycle they close is a cycle.
    A module that must read another at call time imports it at its top, and the other does not
    import it back: split what both need into a module below them."""
    graph = _module_graph()
    cycles = [_describe(c, graph) for c in _components(graph) if c not in CYCLES]
    assert not cycles, "import cycles between modules (or name them in CYCLES, with why):\n" + "\n".join(cycles)


def test_listed_cycles_still_occur():
    """A cycle of CYCLES that is gone is removed from it, so the list only shrinks."""
    stale = sorted(", ".join(sorted(c)) for c in set(CYCLES) - set(_components(_module_graph())))
    assert not stale, "remove from CYCLES (the cycle is gone or changed):\n" + "\n".join(stale)


def test_exceptions_still_occur():
    """An exception whose import is gone is removed from EXCEPTIONS, so the list only shrinks."""
    stale = sorted(f"{a} -> {b}" for a, b in EXCEPTIONS if a not in _modules() or b not in _imports(a))
    assert not stale, "remove from EXCEPTIONS (the import is gone):\n" + "\n".join(stale)
