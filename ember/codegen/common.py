"""What every code generator needs: unique names, the buffers a kernel writes, and the checks
that its input really is a *lowered* function.

A lowered `PrimFunc` (the contract between `tir.lower` and codegen) holds only `For`,
`SeqStmt`, `BufferStore`, `IfThenElse`, `Evaluate`, `Allocate` and `CallRoutine`; every load and store has one
index, a row-major element offset into its flat buffer.
"""

from __future__ import annotations

import re

from ..errors import LowerError
from ..tir.expr import ATOMIC_FUNCS, Buffer, BufferLoad, Call, Var
from ..tir.functor import stmt_exprs, visit_expr, visit_stmt
from ..tir.stmt import BufferStore, CallRoutine, PrimFunc, Stmt


class Namer:
    """Gives each object (a `Var` or a `Buffer`) one valid, unique identifier, by identity: two
    different variables both called `i` get `i` and `i_1`; one variable always gets the same name.

    `reserved` are names the target language or the generated prelude already uses; names that
    start with one of `reserved_prefixes` are also avoided.
    """

    def __init__(self, reserved: frozenset[str] | set[str], reserved_prefixes: tuple[str, ...] = ()):
        self._reserved = reserved
        self._prefixes = reserved_prefixes
        self._names: dict[Var | Buffer, str] = {}
        self._used: set[str] = set()

    def __call__(self, obj: Var | Buffer) -> str:
        name = self._names.get(obj)
        if name is None:
            name = self._names[obj] = self.fresh(obj.name)
        return name

    def fresh(self, hint: str) -> str:
        """A new identifier that looks like `hint`."""
        base = safe_name(hint, self._reserved, self._prefixes)
        name, k = base, 0
        while name in self._used or name in self._reserved:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name


def safe_name(name: str, reserved: frozenset[str] | set[str], reserved_prefixes: tuple[str, ...] = ()) -> str:
    """`name` as an ASCII identifier (other characters become `_`) that is not reserved and does
    not start with a reserved prefix or a digit: `exp` -> `exp_v`, `_x` -> `v_x`, `1d` -> `v1d`."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
    if out[0].isdigit() or out.startswith(reserved_prefixes):
        out = "v" + out
    return out + "_v" if out in reserved else out


def written_buffers(func: PrimFunc) -> set[Buffer]:
    """The buffers the function stores to (its outputs, among its params), an atomic's element
    included (a tile kernel's atomic_add writes its target: it is no `const` parameter)."""
    out: set[Buffer] = set()

    def on_expr(e):
        if isinstance(e, Call) and e.name in ATOMIC_FUNCS and isinstance(e.args[0], BufferLoad):
            out.add(e.args[0].buffer)

    def on_stmt(s):
        if isinstance(s, BufferStore):
            out.add(s.buffer)
        elif isinstance(s, CallRoutine):
            out.update(p.buffer for p in s.writes)
        for e in stmt_exprs(s):
            visit_expr(e, on_expr)

    visit_stmt(func.body, on_stmt)
    return out


def single_index(node: BufferLoad | BufferStore):
    """The one index of a load or store of a lowered function."""
    if len(node.indices) != 1:
        raise LowerError(
            f"code generation needs flattened buffers, but {node.buffer.name} is accessed with "
            f"{len(node.indices)} indices; lower the function first (tir.lower)"
        )
    return node.indices[0]


def not_lowered(node: Stmt) -> LowerError:
    """The error for a statement that lowering should have removed (a block, say)."""
    return LowerError(
        f"code generation needs a lowered function, but found a {type(node).__name__} statement; "
        f"lower the function first (tir.lower)"
    )
