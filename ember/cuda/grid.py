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
from ..tir.expr import Binary, Cast, Const, PrimExpr, Var, as_int
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
    launched); `static`: the grid when no extent is symbolic, else None. The symbolic extents
    are kept as trees of [op, a, b], ints and {"size": k} (the kernel's k-th size argument),
    its saved form (`to_json`), and evaluated by one Python function made of them: a launch
    pays about a microsecond for its grid, not a walk of the tree."""

    def __init__(self, func: PrimFunc, dims: dict[str, int]):
        index = {v: k for k, v in enumerate(func.size_vars)}
        symbolic = {}
        for tag, es in symbolic_extents(func).items():
            for e in es:
                if as_int(e) is None and not free_vars(e) <= set(index):
                    raise LowerError(f"kernel {func.name}: the extent {e} of {tag} is not an expression of the "
                                     f"kernel's sizes ({', '.join(v.name for v in index) or 'none'})")
            symbolic[tag] = [_tree(e, index) for e in es]
        self._set(len(index), dict(dims), symbolic)

    def _set(self, sizes: int, dims: dict[str, int], symbolic: dict[str, list]) -> None:
        self._sizes, self._dims, self._symbolic = sizes, dims, symbolic
        self.static = None if symbolic else tuple(dims.get(f"blockIdx.{a}", 1) for a in "xyz")
        axes = [f"max(0, {', '.join(_python(t, sizes) for t in symbolic[tag])})" if tag in symbolic
                else str(int(dims.get(tag, 1))) for tag in BLOCK_TAGS]
        self._blocks = eval(f"lambda s: ({', '.join(axes)})")  # noqa: S307 (text of ints, s[k] and _OPS only)

    def to_json(self) -> dict:
        return {"sizes": self._sizes, "dims": self._dims, "symbolic": self._symbolic}

    @classmethod
    def from_json(cls, d: dict) -> Grid:
        """The grid `to_json` gave; a ValueError for anything else (a tree of other operators)."""
        grid = cls.__new__(cls)
        grid._set(int(d["sizes"]), {str(t): int(n) for t, n in d["dims"].items()},
                  {str(t): list(trees) for t, trees in d["symbolic"].items()})
        return grid

    def __call__(self, sizes: Sequence[int]) -> tuple[int, int, int]:
        if self.static is not None:
            return self.static
        return self._blocks(sizes)


_OPS = {"+", "-", "*", "//", "%", "min", "max"}  # those of an extent, as Python computes them on ints


def _tree(e: PrimExpr, index: dict):
    """An extent as a tree of [op, a, b], ints and {"size": k}."""
    match e:
        case Const(value):
            return int(value)
        case Var() if e in index:
            return {"size": index[e]}
        case Binary(op, a, b) if op in _OPS:
            return [op, _tree(a, index), _tree(b, index)]
        case Cast(_, v):
            return _tree(v, index)
    raise LowerError(f"the grid extent {e} is not an integer expression of the kernel's sizes")


def _python(tree, sizes: int) -> str:
    """A tree (see _tree) as Python source over `s`, the sizes; a ValueError for anything else."""
    if type(tree) is int:
        return str(tree)
    if isinstance(tree, dict) and set(tree) == {"size"} and type(tree["size"]) is int and 0 <= tree["size"] < sizes:
        return f"s[{tree['size']}]"
    if isinstance(tree, list) and len(tree) == 3 and tree[0] in _OPS:
        a, b = _python(tree[1], sizes), _python(tree[2], sizes)
        return f"{tree[0]}({a}, {b})" if tree[0] in ("min", "max") else f"({a} {tree[0]} {b})"
    raise ValueError(f"{tree!r} is not a grid extent")


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    return a is b or (as_int(a) is not None and as_int(a) == as_int(b)) or str(a) == str(b)

