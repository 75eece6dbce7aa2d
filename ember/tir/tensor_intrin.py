"""Tensor intrinsics by name: what `sch.tensorize(loop, name)` maps a loop nest onto.

An intrinsic is declared by what it computes (`desc`: the loop-IR function of a te compute, its
parameters the inputs then the outputs) and how it is called: one `CallRoutine` of a C function
per role, `body` (the whole computation, a reduction's init included), and for a sum reduction
`reset` (the outputs set to the reduction's identity) and `update` (the outputs += the
computation), built over formal pointers (`IntrinBuffer.access_ptr`) and formal strides (Vars)
that tensorize replaces by the matched loop nest's. `c_source` defines the C functions; a C unit
holds it once, in its prelude. The loop-IR interpreter runs `desc` in place of the call, so a
tensorized kernel is checked on any machine (ember.codegen.python); an intrinsic whose operands lie
in a layout the description cannot see (Tensor Core fragments spread over a warp's lanes, tiles
swizzled in shared memory: ember.intrinsics.mma) gives `emulate`, a NumPy twin of its C calls
that the interpreter runs instead, on the same pointers and scalars. `feature` names the CPU
feature the C code needs (a `Target.features` name), or None for C that runs on any CPU (VNNI's
chooses at run time): a C kernel calling an intrinsic is built only for a target whose flags
enable its feature (`required_features`; ember.backends.c), so the unit is chosen at compile time
and a machine without it is refused before anything runs (Target.check_runs_here).

The call of a role passes its pointers read, then its pointers written, then its scalars: the
arguments of the C function, in that order (the order `CallRoutine` keeps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ScheduleError
from .dtype import INDEX_DTYPE
from .expr import Buffer, PrimExpr, Var, convert
from .functor import collect
from .stmt import BlockRealize, CallRoutine, For, Pointer, PrimFunc

ROLES = ("body", "reset", "update")


class IntrinBuffer:
    """A formal argument of an intrinsic as its `lower_fn` sees it: `access_ptr("r" | "w" | "rw")`
    is its address, `strides` its strides in elements (ints where the intrinsic requires them,
    Vars that tensorize binds to the loop nest's otherwise)."""

    def __init__(self, buffer: Buffer, strides: tuple):
        self.buffer, self.strides = buffer, strides
        self.shape, self.dtype, self.name = buffer.shape, buffer.dtype, buffer.name

    def access_ptr(self, mode: str = "r") -> AccessPtr:
        if mode not in ("r", "w", "rw"):
            raise ScheduleError(f"access_ptr of {self.name} takes 'r', 'w' or 'rw', got {mode!r}")
        return AccessPtr(self.buffer, "r" if mode == "r" else "w")


@dataclass(frozen=True)
class AccessPtr:
    """The address of a formal buffer's first element, read ("r") or written ("w")."""

    buffer: Buffer
    mode: str


def call_extern(*args) -> CallRoutine:
    """`call_extern([dtype,] name, *args)`: a call of the C function `name`, for an intrinsic's
    `lower_fn`. Its arguments are the pointers it reads, then those it writes, then scalars."""
    if len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        args = args[1:]  # TVM's leading return dtype: the C functions here return nothing
    if not args or not isinstance(args[0], str):
        raise ScheduleError("call_extern takes the C function's name first")
    name, rest = args[0], args[1:]
    order = ["r" if isinstance(a, AccessPtr) and a.mode == "r" else "w" if isinstance(a, AccessPtr) else "s"
             for a in rest]
    if order != sorted(order, key="rws".index):
        raise ScheduleError(f"call_extern {name}: pass the pointers read, then those written, then the "
                            f"scalars; got {''.join(order)}")
    reads = tuple(Pointer(a.buffer, convert(0)) for a in rest if isinstance(a, AccessPtr) and a.mode == "r")
    writes = tuple(Pointer(a.buffer, convert(0)) for a in rest if isinstance(a, AccessPtr) and a.mode == "w")
    scalars = tuple(convert(a) for a in rest if not isinstance(a, AccessPtr))
    return CallRoutine(name, (), reads, writes, scalars)


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    name: str
    desc: PrimFunc  # its parameters: the n_inputs inputs, then the outputs
    n_inputs: int
    strides: tuple[tuple[PrimExpr, ...], ...]  # per parameter of desc: an int Const or a formal Var
    calls: tuple[tuple[str, CallRoutine], ...]  # (role, call) for the roles it has
    c_source: str
    feature: str | None = None
    # emulate(role, reads, writes, scalars, strides): the C call of `role` on (array, offset) pairs,
    # the C call's scalars, and the strides of desc's parameters, for the interpreter (None: it runs desc)
    emulate: Callable | None = None

    def call(self, role: str) -> CallRoutine | None:
        return dict(self.calls).get(role)

    def desc_nest(self) -> tuple[list[For], BlockRealize]:
        """The description's loops, outermost first, and its one block."""
        loops, s = [], self.desc.body.block.body
        while isinstance(s, For):
            loops.append(s)
            s = s.body
        assert isinstance(s, BlockRealize), "a te compute's loop nest ends in its block"
        return loops, s

    @property
    def stride_vars(self) -> tuple[Var, ...]:
        return tuple(s for st in self.strides for s in st if isinstance(s, Var))


INTRINSICS: dict[str, TensorIntrin] = {}


def register_intrin(intrin: TensorIntrin, override: bool = False) -> TensorIntrin:
    """Register `intrin` under its name; another intrinsic of that name is an error unless `override`."""
    old = INTRINSICS.get(intrin.name)
    if old is not None and old is not intrin and not override:
        raise ScheduleError(f"a tensor intrinsic named {intrin.name!r} is already declared "
                            f"(pass override=True to replace it)")
    INTRINSICS[intrin.name] = intrin
    return intrin


# functions that declare an intrinsic of a family by its name on first use (or return None): a
# kernel lowered in a worker process names intrinsics this process has not declared yet
RESOLVERS: list[Callable[[str], TensorIntrin | None]] = []


def get_intrin(name: str) -> TensorIntrin:
    if not isinstance(name, str):
        raise ScheduleError(f"a tensor intrinsic is given by its name or as te.decl_tensor_intrin returns it, got "
                            f"{type(name).__name__} {name!r}")
    if name not in INTRINSICS and not any(resolve(name) is not None for resolve in RESOLVERS):
        raise ScheduleError(f"no tensor intrinsic named {name!r}; the declared ones are {sorted(INTRINSICS)}")
    return INTRINSICS[name]


def formal_stride(name: str) -> Var:
    return Var(name, INDEX_DTYPE)


def required_features(funcs) -> dict[str, str]:
    """{feature: the first intrinsic that needs it} over the tensorized calls of `funcs`."""
    needed: dict[str, str] = {}
    for f in funcs:
        for call in collect(f.body, lambda s: isinstance(s, CallRoutine) and "intrin" in dict(s.params)):
            it = get_intrin(dict(call.params)["intrin"])
            if it.feature is not None:
                needed.setdefault(it.feature, it.name)
    return needed
