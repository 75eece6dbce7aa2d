"""What an accelerator is, as the compiler and the simulator see it: a VTA-style device with one
GEMM core, three on-chip memories (input, weight, accumulator), a 2-D DMA engine between DRAM
and those memories, an ALU over the accumulator for the epilogue, and three instruction queues
(load, compute, store) that run in parallel and wait on each other by dependence tokens.

The description is data: the scopes that schedules stage tiles in (`inp_buffer.scope`, what
`cache_read(A, vdla.inp_buffer, ...)` takes), the sizes the backend checks tiles against, the
GEMM core's shape and dtypes, and the costs the simulator's cycle model charges
(ember.accel.simulator). `Accelerator.target` is the Target `ember.build(..., target=vdla)` uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..target import Target
from ..tir import dtype as dt
from ..tir.schedule.cache import register_scope

# the instruction set: opcode -> the queue that runs it (VTA's: loads of inputs and weights on the
# load queue; GEMM, ALU and the accumulator's reset on the compute queue; stores on the store queue)
QUEUES = ("load", "compute", "store")
OPCODES = {"LOAD": "load", "GEMM": "compute", "RESET": "compute", "ALU": "compute", "STORE": "store"}
# (a LOAD into the accumulator, a bias, runs on the compute queue, as VTA's does)
ALU_OPS = ("add", "max", "min", "mul", "shr")  # elementwise on accumulator tiles, with a tile or an immediate:
# bias (add), clip (max then min), relu (max with 0), scale (mul), requantize (shr: arithmetic shift right)


ACCELERATORS: dict[str, Accelerator] = {}  # by name, as their memories' scopes name them


@dataclass(frozen=True)
class Memory:
    """One on-chip memory: `scope` names it in schedules; `bytes` is its capacity; `dtype` what
    it holds; `role` is "inp", "wgt" or "acc"."""

    accel: str
    role: str
    bytes: int
    dtype: str

    @property
    def scope(self) -> str:
        return f"{self.accel}.{self.role}"

    @property
    def elements(self) -> int:
        return self.bytes * 8 // dt.bits(self.dtype)

    def __str__(self):
        return f"{self.scope} ({self.bytes} bytes of {self.dtype})"


@dataclass(frozen=True)
class GemmCore:
    """acc[i, j] += sum_k inp[i, k] * wgt[j, k] over an m x n x k block in one pipelined step;
    `inp_layout`/`wgt_layout` say how a tile is laid out in its memory ("ik" row-major over
    (i, k), "ki" over (k, i); likewise "jk"/"kj")."""

    m: int
    n: int
    k: int
    inp_dtype: str
    wgt_dtype: str
    acc_dtype: str
    inp_layout: str = "ik"
    wgt_layout: str = "jk"

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


@dataclass(frozen=True)
class Costs:
    """The cycle model: DMA moves `dma_bytes_per_cycle` after `dma_latency` cycles per
    instruction (plus `dma_row_cycles` per row of a 2-D copy); a GEMM step takes one cycle once
    the pipeline (`gemm_latency`) is full; an ALU instruction `alu_lanes` elements a cycle after
    `alu_latency`; the
    reset one row of the accumulator tile a cycle."""

    dma_bytes_per_cycle: int = 8
    dma_latency: int = 32
    dma_row_cycles: int = 1
    gemm_latency: int = 4
    alu_lanes: int = 8
    alu_latency: int = 4
    clock_mhz: int = 100


@dataclass(frozen=True)
class Accelerator:
    name: str
    core: GemmCore
    inp_buffer: Memory
    wgt_buffer: Memory
    acc_buffer: Memory
    costs: Costs = field(default_factory=Costs)
    # the tensor intrinsics of its GEMM core (ember.tir.tensor_intrin), each also an attribute by
    # its name: vdla.gemm8x8
    intrinsics: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        for m in self.memories:
            register_scope(m.scope)
        ACCELERATORS[self.name] = self

    def __getattr__(self, name: str):
        for it in self.__dict__.get("intrinsics", ()):
            if it.name == name:
                return it
        raise AttributeError(f"accelerator {self.__dict__.get('name')!r} has no attribute or intrinsic {name!r}")

    @property
    def memories(self) -> tuple[Memory, Memory, Memory]:
        return self.inp_buffer, self.wgt_buffer, self.acc_buffer

    def memory(self, scope: str) -> Memory | None:
        return next((m for m in self.memories if m.scope == scope), None)

    @property
    def target(self) -> Target:
        """The target of `ember.build(s, args, target=accel)`: host C plus this device."""
        return Target("accel", accel=self)

    def __repr__(self):
        c = self.core
        return (f"Accelerator({self.name}: {c.m}x{c.n}x{c.k} {c.inp_dtype}*{c.wgt_dtype}->{c.acc_dtype}, "
                f"{', '.join(str(m) for m in self.memories)})")


def memory_of(scope: str) -> Memory | None:
    """The accelerator memory a buffer's scope names, or None (a host scope)."""
    accel = ACCELERATORS.get(scope.partition(".")[0])
    return accel.memory(scope) if accel is not None else None


def memories(name: str, inp: int, wgt: int, acc: int, core: GemmCore) -> dict:
    """The three memories of accelerator `name`, of these capacities in bytes."""
    return {"inp_buffer": Memory(name, "inp", inp, core.inp_dtype),
            "wgt_buffer": Memory(name, "wgt", wgt, core.wgt_dtype),
            "acc_buffer": Memory(name, "acc", acc, core.acc_dtype)}
