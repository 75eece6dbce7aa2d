"""Where a compile's time went: `CompileStats`, each phase's wall and CPU seconds and what the
caches gave, said in words by `CompileStats.report` (`CompiledModel.compile_report()`,
`ember.compile(..., report=True)`), and the `Clock` whose laps time those phases."""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass

from .passes.pipeline import PassReport
from .runtime.summary import kept_lines


@dataclass(frozen=True)
class CompileStats:
    """Where the compile time went (seconds), and how much was shared or cached; `report()` says it
    in words (`CompiledModel.compile_report()`, `ember.compile(..., report=True)`)."""

    nodes: int
    kernels: int  # distinct kernels in the library
    lowered: int  # distinct operator applications (workloads)
    jobs: int  # processes that lowered those not reused
    lower_s: float  # lowering the kernels (schedules and loop passes)
    codegen_s: float  # the memory plan, the call program and the source
    build_s: float  # the C compiler, or the build cache's lookup
    total_s: float
    cached: bool  # the library came from the build cache
    passes: tuple[PassReport, ...] = ()  # the graph passes run, in order
    reused: int = 0  # of the `lowered` workloads, those lowered by an earlier compile of this process
    loaded: int = 0  # of the `lowered` workloads, those read from the disk (lowered by another process)
    import_s: float = 0.0  # the frontend: torch.export and the ATen graph's conversion, or the ONNX import
    passes_s: float = 0.0  # the graph passes (weight packing among them) and fusion
    load_s: float = 0.0  # loading the library and copying the weights into aligned buffers
    hit: bool = False  # the whole model came from the model cache (ember.runtime.model_cache)
    untraced: bool = False  # found by the module's key, before any trace (ember.frontend.module_key)
    unkeyed: str = ""  # why a torch module had no key before tracing (it was traced to find or make the model)
    exported: str = ""  # why a torch module was traced by torch.export, not recorded (ember.frontend.torch.record)
    kept_s: float = 0.0  # saving the model into the model cache (on a miss)
    cpu: Mapping[str, float] = dataclasses.field(default_factory=dict)  # each phase's CPU seconds (`Clock`)
    # precision "bf16": the products kept in fp32 and why (ember.passes.bf16_weights.kept_fp32)
    kept_fp32: tuple[str, ...] = ()

    def __str__(self):
        return (f"{self.nodes} nodes, {self.kernels} kernels ({self.lowered} workloads: {self._fresh} lowered in "
                f"{self.jobs} process(es), {self.reused} reused, {self.loaded} from disk): lower "
                f"{self.lower_s:.2f} s, codegen {self.codegen_s:.2f} s, build "
                f"{self.build_s:.2f} s{' (cached)' if self.cached else ''}, total {self.total_s:.2f} s")

    @property
    def _fresh(self) -> int:
        return self.lowered - self.reused - self.loaded

    def report(self, slowest: int = 3) -> str:
        """Each phase's seconds and share of the total, its CPU seconds (its children's too: the C
        compiler, lowering workers), what was cached, and the `slowest` graph passes (weight
        packing is the pack_weights pass, plus the aligned copies at load)."""
        passes = sorted(self.passes, key=lambda r: -r.seconds)[:slowest]
        rows = [
            ("import", self.import_s, "the frontend (the module's trace and its conversion, or the ONNX import)"
             if self.import_s else "a graph: nothing imported"),
            ("passes", self.passes_s, "graph passes and fusion; slowest: " + ", ".join(
                f"{r.name} {r.seconds:.2f} s" for r in passes) if passes else "graph passes and fusion"),
            ("lowering", self.lower_s, f"{self.lowered} workloads: {self._fresh} lowered in {self.jobs} process(es), "
                                       f"{self.reused} reused from this process, {self.loaded} read from the disk"),
            ("codegen", self.codegen_s, "memory plan, call program, source"),
            ("C compiler", self.build_s, "build cache hit" if self.cached else "built"),
            ("load", self.load_s, "the library loaded, the weights copied aligned"),
        ]
        if self.hit:
            rows = [("import", self.import_s, "the module's key (its classes' code, attributes and weights hashed): "
                                              "nothing traced" if self.untraced else
                     "torch.export's trace, the digest of its program and weights"),
                    ("load", self.load_s, "the model cache's entry checked, its weights mapped, the library loaded; "
                                                   "nothing converted, lowered or built")]
        elif self.kept_s:
            rows.append(("kept", self.kept_s, "the model handed to the model cache for the next process (saved "
                                              "in the background: ember.runtime.model_cache)"))
        total = self.total_s or 1.0
        cpu = f" ({sum(self.cpu.values()):.2f} s of CPU)" if self.cpu else ""
        made = f"{self.kernels} kernels, from the model cache" if self.hit else \
            f"{self.nodes} nodes, {self.kernels} kernels"
        lines = [f"compiled in {self.total_s:.2f} s{cpu}: {made}"]
        for name, s, what in rows:
            used = f" {self.cpu.get(name, 0.0):6.2f} s CPU" if cpu else ""
            lines.append(f"  {name:<11}{s:7.2f} s {100 * s / total:4.0f}%{used}  {what}")
        if self.unkeyed:
            lines.append(f"  (traced: no key before tracing: {self.unkeyed})")
        if self.exported:
            lines.append(f"  (traced by torch.export, not recorded: {self.exported})")
        return "\n".join([*lines, *kept_lines(self.kept_fp32)])


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the C compiler, lowering workers)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


class Clock:
    """Wall and CPU seconds of a compile's phases, lap by lap: on a machine other work shares, the
    wall clock counts the waits for a core, the CPU time only the work."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), _cpu_s()

    def lap(self) -> tuple[float, float]:
        """The wall and CPU seconds since the last lap (or the start)."""
        wall, cpu = time.perf_counter(), _cpu_s()
        since = wall - self.wall, cpu - self.cpu
        self.wall, self.cpu = wall, cpu
        return since


def with_import(stats: CompileStats, import_s: float, import_cpu: float, **more) -> CompileStats:
    """The stats of a compile_graph with the frontend's seconds (and `more` phases: kept_s) added."""
    kept_s, kept_cpu = more.get("kept", (0.0, 0.0))
    return dataclasses.replace(stats, import_s=import_s, kept_s=kept_s, total_s=stats.total_s + import_s + kept_s,
                               cpu={"import": import_cpu, **stats.cpu, **({"kept": kept_cpu} if kept_s else {})})
