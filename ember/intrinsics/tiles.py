"""A register or matrix tile of a GEMM as one tensor intrinsic: the product that AVX512-BF16 and
AVX512-VNNI (`avx512.py`) and AMX (`amx.py`) compute a block of, declared once, and the GEMM
schedule onto it.

    c[i, v, l] = sum over k < KG, g < G of a[i, k, g] * b[v, k, l, g]      (in the accumulator type)

a is MR rows of K = KG * G values in groups of G (its rows any stride apart, a group G apart),
b NV column blocks of 16 packed in the units' layout [N / 16][K / G][16][G] (a block any stride
apart, then contiguous: G values of one column, then the next column's), c MR rows of NV * 16
accumulators (rows any stride apart). G is what one lane's instruction takes of k: 2 bf16
(vdpbf16ps, tdpbf16ps) or 4 bytes (vpdpbusd, tdpbusd). The whole reduction is one call, so a
unit keeps its accumulators in registers (or tiles) from the first k to the last and stores them
once: the C function takes KG and the strides of a's rows, b's blocks and c's rows as scalars.
The description's extents are fixed, so there is one intrinsic per (unit, MR, NV, KG), declared
on first use (`Unit.intrin`), or by its name (`<unit>_<MR>x<NV * 16>x<K>`) where a kernel lowered
in another process calls it (the units register themselves, `UNITS`).

`gemm` is C = A @ B over such operands, tiled MR x NV * 16 and tensorized: the tiles over one
block of columns next to each other (its panel of b stays in L2 while the rows pass), the
column blocks and row tiles one parallel loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .. import te
from ..errors import ScheduleError
from ..tir.expr import as_int
from ..tir.tensor_intrin import RESOLVERS

LANES = 16  # the columns of one block of b: a 512-bit register of fp32 or int32, a tile's row
UNITS: dict[str, Unit] = {}


@dataclass(frozen=True)
class Unit:
    """A unit computing tiles: `feature` (a Target feature) the C needs; `group` values of k per
    lane; the dtypes of a, b and the accumulators; `c_source(mr, nv)` the C of the function
    `function(mr, nv)`; `shapes` the (MR, NV) it computes; `kg_step` what KG must be a multiple of."""

    name: str
    feature: str
    group: int
    a_dtype: str
    b_dtype: str
    acc_dtype: str
    shapes: tuple[tuple[int, int], ...]
    c_source: Callable[[int, int], str]
    kg_step: int = 1

    def __post_init__(self):
        UNITS[self.name] = self

    def function(self, mr: int, nv: int) -> str:
        return f"ember_{self.name}_tile_{mr}x{nv}"

    def fits(self, m: int, n: int, k: int) -> tuple[int, int] | None:
        """The largest (MR, NV) of `shapes` whose tiles cover (m, n, k) whole, or None."""
        if k % (self.group * self.kg_step) or n % LANES:
            return None
        return next(((mr, nv) for mr, nv in self.shapes if m % mr == 0 and n % (nv * LANES) == 0), None)

    def intrin(self, mr: int, nv: int, kg: int):
        if (mr, nv) not in self.shapes or kg < 1 or kg % self.kg_step:
            raise ScheduleError(f"{self.name} computes tiles of {self.shapes} (MR, NV) over a multiple of "
                                f"{self.kg_step} groups of k, not ({mr}, {nv}) over {kg}")
        return _declare(self, mr, nv, kg)


@functools.cache
def _declare(unit: Unit, mr: int, nv: int, kg: int):
    g = unit.group
    a = te.placeholder((mr, kg, g), unit.a_dtype, name="a")
    b = te.placeholder((nv, kg, LANES, g), unit.b_dtype, name="b")
    c = te.compute((mr, nv, LANES), _product(a, b, unit.acc_dtype), name="c")

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        return te.hardware_intrinsic(unit.function(mr, nv), pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"),
                                     kg, pa.strides[0], pb.strides[0], pc.strides[0])

    return te.decl_tensor_intrin(c.op, lower_fn, name=f"{unit.name}_{mr}x{nv * LANES}x{kg * g}",
                                 c_source=unit.c_source(mr, nv), feature=unit.feature, override=True,
                                 strides={a: (None, g, 1), b: (None, LANES * g, g, 1), c: (None, LANES, 1)})


def _resolve(name: str):
    """The intrinsic named `name` (see `_declare`), declared now, if a unit's."""
    unit, _, shape = name.rpartition("_")
    dims = shape.split("x")
    if unit not in UNITS or len(dims) != 3 or not all(d.isdigit() for d in dims):
        return None
    (mr, cols, k), u = (int(d) for d in dims), UNITS[unit]
    return u.intrin(mr, cols // LANES, k // u.group)


RESOLVERS.append(_resolve)


def _product(a, b, acc_dtype: str):
    """The tile's sum (a te compute's body over (row, block, lane)) of a (.., KG, G) by b
    (.., KG, 16, G) in `acc_dtype`."""
    kg, g = a.shape[-2], a.shape[-1]
    k = te.reduce_axis((0, kg), name="kg")
    r = te.reduce_axis((0, g), name="g")
    return lambda i, v, l: te.sum(a[i, k, r].astype(acc_dtype) * b[v, k, l, r].astype(acc_dtype), axis=[k, r])


def product(a, b, acc_dtype: str, name: str = "C", tag: str = "", attrs: dict | None = None):
    """C (M, N / 16, 16) = A (M, KG, G) @ B (N / 16, KG, 16, G) in `acc_dtype` (c.reshape(M, N)
    is the (M, N) product): the te compute a tiled schedule tensorizes (`schedule`)."""
    return te.compute((a.shape[0], b.shape[0], LANES), _product(a, b, acc_dtype), name=name, tag=tag,
                      attrs=attrs or {})


def schedule(s, c, unit: Unit, mr: int, nv: int) -> None:
    """Tile `c` (a `product`) by MR rows and NV blocks, the row tiles of one block of columns
    next to each other in one parallel loop with the blocks, each tile one call of the unit."""
    i, jo, _ = s[c].op.axis
    kg = as_int(s[c].op.reduce_axis[0].dom.extent)
    io, ii = s[c].split(i, factor=mr)
    joo, joi = s[c].split(jo, factor=nv)
    s[c].reorder(joo, io, ii, joi)
    s[c].parallel(s[c].fuse(joo, io))
    s[c].tensorize(ii, unit.intrin(mr, nv, kg))


def gemm(unit: Unit, m: int, n: int, k: int):
    """C = A @ B on `unit`: A (M, K / G, G), Bp (N / 16, K / G, 16, G) (`pack`), C (M, N / 16, 16)
    in its accumulator type. (M, N, K) must fit one of the unit's tiles (`Unit.fits`). Returns
    (schedule, [A, Bp, C])."""
    fit = unit.fits(m, n, k)
    if fit is None:
        raise ScheduleError(f"{unit.name}: no tile of {unit.shapes} covers {m} x {n} x {k} "
                         f"(N a multiple of {LANES} * NV, K of {unit.group * unit.kg_step})")
    g = unit.group
    a = te.placeholder((m, k // g, g), unit.a_dtype, name="A")
    bp = te.placeholder((n // LANES, k // g, LANES, g), unit.b_dtype, name="Bp")
    c = product(a, bp, unit.acc_dtype)
    s = te.create_schedule(c.op)
    schedule(s, c, unit, *fit)
    return s, [a, bp, c]


def pack(b, group: int):
    """B (K, N) in the units' layout [N / 16][K / group][16][group] (VNNI's and AMX's: the
    values of one column along k in groups, column after column)."""
    k, n = b.shape
    return b.reshape(k // group, group, n // LANES, LANES).transpose(2, 0, 3, 1).copy()


def guard(name: str, text: str) -> str:
    """C defined once per unit, however many intrinsics carry it."""
    macro = f"EMBER_{name.upper()}_DEFINED"
    return f"#ifndef {macro}\n#define {macro}\n{text}\n#endif\n"
