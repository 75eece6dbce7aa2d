"""A kernel's grid when its extents are the model's symbolic sizes, computed per launch.

A model compiled with symbolic sizes gives kernels whose loops bound to blocks have extents that
are expressions of the kernel's size arguments (`ceil(n / 256)` blocks of an elementwise kernel
over n elements): the kernel takes the sizes as int64 arguments after its pointers, and each
launch evaluates those extents for its sizes. Threads per block stay constants (the schedules
choose them), so the launch's limits and the kernel's `__launch_bounds__` hold for every size.

A block index bound by one symbolic extent launches exactly that many blocks and needs no guard;
one bound by several different extents (a kernel with several outputs) launches their largest and
every loop bound to it is guarded (`guarded_tags`), as constant extents are below the largest.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import LowerError
from ..runtime.args import evaluate
from ..tir.expr import Binary, Cast, Const, PrimExpr, Var, as_int, binary, const
from ..tir.expr_functor import free_vars
from ..tir.functor import visit_stmt
from ..tir.stmt import BLOCK_TAGS, THREAD_BINDING, For, PrimFunc


def symbolic_extents(func: PrimFunc) -> dict[str, list[PrimExpr]]:
    """Per block index, the distinct extents of the loops bound to it, where one is not constant."""
    extents: dict[str, list[PrimExpr]] = {}

    def visit(s):
        if isinstance(s, For) and s.kind == THREAD_BINDING and s.thread_tag in BLOCK_TAGS:
            seen = extents.setdefault(s.thread_tag, [])
            if not any(_same(s.extent, e) for e in seen):
                seen.append(s.extent)

    visit_stmt(func.body, visit)
    return {tag: es for tag, es in extents.items() if any(as_int(e) is None for e in es)}


def guarded_tags(func: PrimFunc) -> set[str]:
    """The block indices whose loops are guarded: bound by several extents, one of them symbolic."""
    return {tag for tag, es in symbolic_extents(func).items() if len(es) > 1}


class Grid:
    """The blocks of a launch along x, y, z: `grid(sizes)` for the kernel's size arguments (in
    `func.size_vars` order), 0 along an axis where the sizes leave no work (then nothing is
    launched); `static`: the grid when no extent is symbolic, else None."""

    def __init__(self, func: PrimFunc, dims: dict[str, int]):
        self.size_vars = func.size_vars
        self._symbolic = symbolic_extents(func)
        for tag, es in self._symbolic.items():
            for e in es:
                if as_int(e) is None and not free_vars(e) <= set(self.size_vars):
                    raise LowerError(f"kernel {func.name}: the extent {e} of {tag} is not an expression of the "
                                     f"kernel's sizes ({', '.join(v.name for v in self.size_vars) or 'none'})")
        self._dims = dict(dims)
        self.static = None if self._symbolic else tuple(dims.get(f"blockIdx.{a}", 1) for a in "xyz")

    def to_json(self) -> dict:
        """The grid as JSON: the constant extents, and each symbolic one as a tree of [op, a, b],
        ints and {"size": k} (the kernel's k-th size argument)."""
        index = {v: k for k, v in enumerate(self.size_vars)}

        def tree(e):
            match e:
                case Const(value):
                    return int(value)
                case Var():
                    return {"size": index[e]}
                case Binary(op, a, b):
                    return [op, tree(a), tree(b)]
                case Cast(_, v):
                    return tree(v)
            raise LowerError(f"the grid extent {e} has no saved form")

        return {"sizes": len(self.size_vars), "dims": self._dims,
                "symbolic": {tag: [tree(e) for e in es] for tag, es in self._symbolic.items()}}

    @classmethod
    def from_json(cls, d: dict) -> Grid:
        size_vars = tuple(Var(f"s{k}") for k in range(d["sizes"]))

        def expr(t):
            if isinstance(t, int):
                return const(t)
            if isinstance(t, dict):
                return size_vars[t["size"]]
            return binary(t[0], expr(t[1]), expr(t[2]))

        grid = cls.__new__(cls)
        grid.size_vars, grid._dims = size_vars, dict(d["dims"])
        grid._symbolic = {tag: [expr(t) for t in ts] for tag, ts in d["symbolic"].items()}
        grid.static = None if grid._symbolic else tuple(grid._dims.get(f"blockIdx.{a}", 1) for a in "xyz")
        return grid

    def __call__(self, sizes: Sequence[int]) -> tuple[int, int, int]:
        if self.static is not None:
            return self.static
        env = dict(zip(self.size_vars, (int(n) for n in sizes)))
        grid = []
        for axis in "xyz":
            tag = f"blockIdx.{axis}"
            if tag in self._symbolic:
                grid.append(max(0, *(evaluate(e, env) for e in self._symbolic[tag])))
            else:
                grid.append(self._dims.get(tag, 1))
        return tuple(grid)


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    return a is b or (as_int(a) is not None and as_int(a) == as_int(b)) or str(a) == str(b)

