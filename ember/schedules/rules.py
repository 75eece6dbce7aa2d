"""Schedule rules shared by the default schedules (ember.schedules.cpu) and the tuner's sketches
(ember.tune.space), written once on the loop-IR schedule (a te schedule is a facade over one:
pass `s.sch` and `s[t].block`).

- `inline_intermediates`: every spatial stage that is not an output is inlined into its readers,
  consumers first, so that it never reaches memory;
- `parallel_vectorize`: a nest at the root gets its outer spatial loops fused into one parallel
  loop and its innermost spatial loop vectorized.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence

from ..errors import ScheduleError
from ..tir.expr import as_int
from ..tir.schedule import BlockRV, Schedule
from ..tir.stmt import Block


def inline_intermediates(sch: Schedule, among: Collection[str] | None = None,
                         where: Callable[[Block], bool] | None = None) -> None:
    """Inline, consumers first, every block that neither reduces nor writes an output (a parameter
    of the function), of those named in `among` (None: every block) that `where` accepts (None:
    all). A block the inliner refuses stays where it is."""
    outputs = {id(p) for p in sch.mod.params}
    for realize in reversed(sch.all_realizes()):
        block = realize.block
        if block.name == "root" or block.is_reduction or (among is not None and block.name not in among):
            continue
        if any(id(w.buffer) in outputs for w in block.writes) or (where is not None and not where(block)):
            continue
        with contextlib.suppress(ScheduleError):
            sch.compute_inline(sch.get_block(block.name))


def parallel_vectorize(sch: Schedule, block: BlockRV, lanes: Sequence[int] = ()) -> None:
    """A nest of its own loops (one per iteration variable, none scheduled yet; else nothing is
    done): the leading spatial loops fused into one parallel loop, the innermost vectorized.

    With `lanes` (the default schedules), a nest without reduction loops has its innermost loop
    split by the first width in `lanes` that divides its static extent, and the inner part
    vectorized: one register's worth; where no width divides it and the block reads every input
    at its own place (same-shape elementwise: a GELU over 512 x 3199), the fewest innermost loops
    whose extents multiply to a multiple of a width are fused and split so instead; else the
    loop stays scalar (a guarded vector loop would run scalar anyway). The innermost spatial
    loop stays out of the parallel loop.
    Without (the tuner's sketches), the innermost loop is vectorized whole where it is spatial
    (the lowering splits it into registers), and above reduction loops every spatial loop runs in
    parallel. A vector loop the vectorizer cannot take raises ScheduleError, the parallel loop
    made."""
    kinds = [iv.kind for iv in sch.get_realize(block).block.iter_vars]
    loops = sch.get_loops(block)
    if not loops or len(loops) != len(kinds) or any(sch.get_for(lp).kind != "serial" for lp in loops):
        return
    spatial = loops[: kinds.index("reduce") if "reduce" in kinds else None]
    if len(spatial) < len(loops):  # reduction loops inside: no vector loop
        parallel, vector = (spatial[:-1] or spatial) if lanes else spatial, None
    elif lanes:
        extent = as_int(sch.get_for(loops[-1]).extent)
        width = next((w for w in lanes if extent is not None and extent % w == 0), None)
        trailing = _trailing_vector(sch, block, loops, lanes) if width is None else None
        if trailing is not None:  # the innermost loops fused, a register's worth of their elements
            count, width = trailing
            outer, vector = sch.split(sch.fuse(*loops[-count:]), factors=[None, width])
            parallel = [*spatial[:-count], outer]
        elif width is None:
            parallel, vector = spatial[:-1] or spatial, None
        else:
            outer, vector = sch.split(loops[-1], factors=[None, width])
            parallel = [*spatial[:-1], outer]
    else:
        parallel, vector = spatial[:-1] or spatial, spatial[-1] if len(spatial) > 1 else None
    if parallel:
        sch.parallel(sch.fuse(*parallel) if len(parallel) > 1 else parallel[0])
    if vector is not None:
        sch.vectorize(vector)


def _trailing_vector(sch: Schedule, block: BlockRV, loops, lanes: Sequence[int]) -> tuple[int, int] | None:
    """(loops, width): the fewest innermost loops (two or more) whose static extents multiply to a
    multiple of a width in `lanes`, for a block that reads every buffer at the place it writes
    (their fused index is the flat one: no division per lane) or at a fixed place (a scalar);
    None otherwise."""
    realized = sch.get_realize(block).block
    ivs = [iv.var for iv in realized.iter_vars]
    (write,) = realized.writes if len(realized.writes) == 1 else (None,)
    def at_place(r) -> bool:
        return (tuple(r.buffer.shape) == tuple(write.buffer.shape) and len(r.region) == len(ivs)
                and all((rng.min is iv or (as_int(d) == 1 and as_int(rng.min) == 0)) and as_int(rng.extent) == 1
                        for rng, iv, d in zip(r.region, ivs, r.buffer.shape)))

    def invariant(r) -> bool:  # (a scalar operand, broadcast to every lane)
        return all(as_int(rng.min) is not None and as_int(rng.extent) is not None for rng in r.region)

    if write is None or not at_place(write) or not all(at_place(r) or invariant(r) for r in realized.reads):
        return None
    product = 1
    for count in range(1, len(loops) + 1):
        extent = as_int(sch.get_for(loops[-count]).extent)
        if extent is None:
            return None
        product *= extent
        width = next((w for w in lanes if product % w == 0), None)
        if width is not None and count > 1:
            return count, width
    return None
