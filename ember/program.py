"""The call program of a compiled model: which kernels run, in what order, over which buffers.

A model compiles to kernels and to this program, which calls them. The program is an IR of its
own, apart from the graph IR (which tensor operations) and the loop IR (which loops): it says
which kernel each step launches, on which bytes, and the control flow around the launches. Each
backend renders it (ember.backends: the C backend as the model's entry function,
ember.codegen.entry; a device backend as launches on its stream) or runs it (the interpreter,
ember.runtime.interpreted). ember.passes.call_program builds it from the kernel graph and its
memory plan.

Buffers are references (`Ref`) into the arrays every entry receives: the model's inputs, its
outputs, its weights, the workspace (tensor k of the memory plan, at the offset its layout gives
for the call's sizes), the sizes (the model's symbols), and the locals of loops (a pointer the loop
moves). A view makes no statement: its readers are handed the reference of the bytes it views.
A dimension is an int, a "size" reference, or an expression of the sizes (`SizeExpr`).

Statements:
- `Launch(kernel, grid, args, sizes)`: run the kernel of that name on its buffer arguments (each
  with its dimensions and dtype) and size arguments. `grid` is the launch grid of a device
  kernel, () for a kernel that runs its own parallel loops (the CPU's: OpenMP inside the kernel);
- `Copy`: bytes from one buffer to another (an output no kernel writes, a loop's initial values);
- `Branch`: the statements of one region or the other, on a one-byte condition;
- `Loop`: a loop's iterations over its body, its carried values double-buffered (see Loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KINDS = ("input", "output", "weight", "workspace", "size", "local")


@dataclass(frozen=True)
class Ref:
    """Entry `index` of one of the entry's arrays (KINDS)."""

    kind: str
    index: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"reference kind {self.kind!r} is not one of {KINDS}")


@dataclass(frozen=True)
class SizeExpr:
    """A dimension that is an expression of the model's symbols (ember.dims): the sum over `terms`
    of coefficient * the product of the `sizes` entries it names."""

    terms: tuple[tuple[tuple[int, ...], int], ...]

    def value(self, sizes) -> int:
        total = 0
        for idx, c in self.terms:
            for i in idx:
                c *= int(sizes[i])
            total += c
        return total


Dims = tuple[int | Ref | SizeExpr, ...]


def numel(dims: Dims, sizes) -> int:
    """The elements of `dims` for the call's `sizes` (the model's symbols, in order)."""
    n = 1
    for d in dims:
        n *= int(sizes[d.index]) if isinstance(d, Ref) else d.value(sizes) if isinstance(d, SizeExpr) else d
    return n


@dataclass(frozen=True)
class Arg:
    """A buffer argument of a launch: where it is, its dimensions and its dtype."""

    ref: Ref
    dims: Dims
    dtype: str


@dataclass(frozen=True)
class Launch:
    """Run kernel `kernel` (a name of Program.kernels) on `args` (the last `outputs` of them are
    written) and the size arguments `sizes` ("size" references); `comment`: the nodes it computes."""

    kernel: str
    grid: tuple = ()
    args: tuple[Arg, ...] = ()
    sizes: tuple[Ref, ...] = ()
    outputs: int = 0
    comment: str = ""


@dataclass(frozen=True)
class Copy:
    """dst = src, `itemsize` bytes per element, `dims` ints, "size" references or SizeExprs."""

    dst: Ref
    src: Ref
    dims: Dims
    itemsize: int


@dataclass(frozen=True)
class Branch:
    """Run `then` when the byte at `cond` is not 0, else `other`."""

    cond: Ref
    then: tuple
    other: tuple


@dataclass(frozen=True)
class Slice:
    """Local `local` points at entry i (from the end: length - 1 - i, where `reverse`) of the
    tensor at `base`, whose entries are `dims` elements of `itemsize` bytes."""

    local: int
    base: Ref
    dims: Dims
    itemsize: int
    length: int | Ref
    reverse: bool = False


@dataclass(frozen=True)
class Carried:
    """A loop-carried value, double-buffered: read through local `current`, written through local
    `new`, swapped after each iteration (see Loop)."""

    current: int
    new: int
    output: Ref
    next: Ref
    dims: Dims
    itemsize: int


@dataclass(frozen=True)
class Loop:
    """Loop number `index`: its iteration number and condition (an int64 and a byte) are locals
    `iteration` and `cond` point at; `init` copies run first, then, while the iteration number is
    below the trip count (at `trips`) and the condition holds: each of `slices` points at this
    iteration's slice of a scanned input or a scan output, `body` runs, and the condition is read
    from `cond_out`. `carried`: per carried value, the local the body reads it through (first at
    `output`), the local the body writes it through (first at `next`); the two are swapped after
    each iteration, so no carried value is copied per iteration, and a value the last iteration
    left in `next` is copied to `output` after the loop."""

    index: int
    trips: Ref
    cond_in: Ref
    iteration: int
    cond: int
    init: tuple[Copy, ...]
    slices: tuple[Slice, ...]
    body: tuple
    cond_out: Ref
    carried: tuple[Carried, ...]


Stmt = Launch | Copy | Branch | Loop


@dataclass(frozen=True)
class Program:
    """A model's call program: its kernels (the lowered loop-IR functions, each launched by
    name), its statements in order, and its weights (constant names, in the order of the
    entry's `weights` array)."""

    kernels: tuple
    body: tuple[Stmt, ...]
    weights: tuple[str, ...]

    def launches(self) -> list[Launch]:
        return launches(self.body)


def launches(stmts: Sequence[Stmt]) -> list[Launch]:
    """Every launch, those inside branches and loops too, in program order (then before other)."""
    out = []
    for st in stmts:
        match st:
            case Launch():
                out.append(st)
            case Branch():
                out += launches(st.then) + launches(st.other)
            case Loop():
                out += launches(st.body)
    return out
