"""Where a block is computed: compute_at, reverse_compute_at, compute_root.

compute_at(block, loop) moves a producer under a loop of its consumers and computes there only
the region they read in one iteration of that loop (bounds inference: the consumers' access
indices, with their bindings substituted, evaluated over the loops inside `loop`). For a
3-point stencil under a 32-row tile, that is 34 rows. The producer's old loops are dropped and
a fresh nest is built; schedule it afterwards. reverse_compute_at is the mirror image: a
consumer moves under a producer's loop and computes what that iteration produced; it refuses
to move a block ahead of anything else it reads or of an earlier write of its output (the init
block of a decomposed reduction).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import Const
from ..region import Interval, accesses, interval_of, region_under, union
from ..stmt import For, SeqStmt
from .nest import (
    check_sole_writer,
    check_writes_its_point,
    detach,
    insert_in_body,
    iter_predicate,
    loop_analyzer,
    nest_over,
    output_buffers,
    reads_buffer,
    realizes_in,
    replace_loop_body,
    writes_buffer,
)
from .registry import primitive
from .state import BlockRV, LoopRV, Schedule


def _merged(regions, ana: Analyzer):
    """Per-dimension union of several regions (None entries are skipped)."""
    result = None
    for r in regions:
        if r is not None:
            result = r if result is None else [union(a, b, ana) for a, b in zip(result, r)]
    return result


@primitive
def compute_at(sch: Schedule, block: BlockRV, loop: LoopRV) -> None:
    """Compute `block` under `loop`, only the part its consumers inside the loop read."""
    realize = sch.get_realize(block)
    name = realize.block.name
    outs = output_buffers(realize.block)
    target = sch.get_for(loop)
    if any(r is realize for r in realizes_in(target)):
        raise ScheduleError(f"compute_at: loop {target.loop_var.name} is one of block {name!r}'s own loops")
    if not reads_buffer(target.body, set(outs)):
        raise ScheduleError(
            f"compute_at: nothing under loop {target.loop_var.name} reads {', '.join(b.name for b in outs)}"
            f" (block {name!r} can only be computed at a loop of one of its consumers)"
        )
    outside = [r.block.name for r in sch.all_realizes()
               if r is not realize and reads_buffer(r.block, set(outs))
               and not any(x is r for x in realizes_in(target))]
    if outside:
        raise ScheduleError(
            f"compute_at: block {outside[0]!r} also reads {outs[0].name} but is not under loop "
            f"{target.loop_var.name}"
        )
    check_writes_its_point(realize.block, "compute_at")
    check_sole_writer(sch, realize, "compute_at")
    carried = iter_predicate(sch, block, "compute_at")
    detach(sch, block)
    target = sch.get_for(loop)
    path = sch.find_path(lambda s: s is target)
    ana = loop_analyzer(path)
    region = _merged((region_under(target.body, b, loads=True, stores=False, ana=ana) for b in outs), ana)
    if any(b.scope == "shared" for b in outs):
        region = _relax_threads(region, path, ana)
    spatial = [iv.var for iv in realize.block.iter_vars if iv.kind == "spatial"]
    nest = nest_over(realize, dict(zip(spatial, region)), ana, carried)
    replace_loop_body(sch, target, insert_in_body(target.body, nest, before_reader_of=set(outs)))


def _relax_threads(region, path, ana: Analyzer):
    """A shared buffer is the block's, written by all its threads together: the region every
    thread of the block reads, i.e. relaxed over the loops bound to threadIdx around the
    attachment (as TVM's bound inference relaxes them for shared scope)."""
    dom = {f.loop_var: Interval(f.min, f.min + f.extent - 1) for f in path
           if isinstance(f, For) and (f.thread_tag or "").startswith("threadIdx")}
    if not dom:
        return region
    relaxed = []
    for r in region:
        lo, hi = interval_of(r.lo, dom, ana), interval_of(r.hi, dom, ana)
        if lo is None or hi is None:
            raise ScheduleError("compute_at: the shared region read by the block's threads cannot be bounded")
        relaxed.append(Interval(ana.simplify(lo.lo), ana.simplify(hi.hi)))
    return relaxed


@primitive
def reverse_compute_at(sch: Schedule, block: BlockRV, loop: LoopRV) -> None:
    """Compute consumer `block` under a loop of its producer, right after what it reads is made."""
    realize = sch.get_realize(block)
    blk = realize.block
    name = blk.name
    target = sch.get_for(loop)
    if any(r is realize for r in realizes_in(target)):
        raise ScheduleError(f"reverse_compute_at: loop {target.loop_var.name} is one of block {name!r}'s own loops")
    produced = [r.buffer for r in blk.reads if writes_buffer(target.body, {r.buffer})]
    if not produced:
        raise ScheduleError(
            f"reverse_compute_at: block {name!r} reads nothing that is written under loop {target.loop_var.name}"
        )
    writers_outside = [r.block.name for r in sch.all_realizes() if writes_buffer(r.block, set(produced))
                       and not any(x is r for x in realizes_in(target))]
    if writers_outside:
        raise ScheduleError(
            f"reverse_compute_at: block {writers_outside[0]!r} also writes {produced[0].name} outside "
            f"loop {target.loop_var.name}"
        )
    _check_inputs_ready(sch, realize, target, set(produced))
    kinds = {iv.var: iv for iv in blk.iter_vars}
    ranges: dict = {}
    carried = iter_predicate(sch, block, "reverse_compute_at")
    detach(sch, block)
    target = sch.get_for(loop)
    path = sch.find_path(lambda s: s is target)
    ana = loop_analyzer(path)
    for buf in produced:
        region = region_under(target.body, buf, loads=False, stores=True, ana=ana)
        for idx in accesses(blk, buf, loads=True, stores=False):
            for i, r in zip(idx, region):
                if i in kinds and kinds[i].kind == "reduce":
                    dom = kinds[i].dom
                    if not (ana.can_prove_equal(r.lo, dom.min) and ana.can_prove_equal(r.hi, dom.min + dom.extent - 1)):
                        raise ScheduleError(
                            f"reverse_compute_at: block {name!r} reduces over {buf.name} along {i.name}, but only "
                            f"part of that axis is produced under loop {target.loop_var.name}"
                        )
                elif i in kinds:
                    ranges[i] = r if i not in ranges else union(ranges[i], r, ana)
                elif not isinstance(i, Const):
                    raise ScheduleError(
                        f"reverse_compute_at: block {name!r} reads {buf.name} at {i}; each index must be "
                        "one of its iteration variables"
                    )
    nest = nest_over(realize, ranges, ana, carried)
    replace_loop_body(sch, target, insert_in_body(target.body, nest, after_writer_of=set(produced)))


def _check_inputs_ready(sch: Schedule, realize, target, produced: set) -> None:
    """Everything else the consumer reads must be computed before the loop it moves under, and so
    must every earlier write of what it writes: a reduction update whose init was decomposed reads
    its output (its regions leave that out), and moving it ahead of the init block would let the
    init overwrite the result."""
    order = {id(r): k for k, r in enumerate(sch.all_realizes())}
    start = min(order[id(r)] for r in realizes_in(target))
    others = {r.buffer for r in realize.block.reads} - produced
    outs = set(output_buffers(realize.block))
    for r in sch.all_realizes():
        if r is realize or r.block.name == "root":
            continue
        if writes_buffer(r.block, others) and order[id(r)] >= start:
            raise ScheduleError(
                f"reverse_compute_at: block {realize.block.name!r} also reads what block {r.block.name!r} "
                f"computes, which is not done before loop {target.loop_var.name}"
            )
        if writes_buffer(r.block, outs) and start <= order[id(r)] < order[id(realize)]:
            raise ScheduleError(
                f"reverse_compute_at: block {r.block.name!r} writes {', '.join(sorted(b.name for b in outs))} "
                f"before block {realize.block.name!r} does but not before loop {target.loop_var.name}; "
                f"moving {realize.block.name!r} there would reverse the two writes"
            )


@primitive
def compute_root(sch: Schedule, block: BlockRV) -> None:
    """Compute the whole of `block` at the top level, before the first block that reads it; a
    ScheduleError where something after that point writes what the block reads (its producer
    shares a top-level nest with its reader: no place at the top level is after the one and before
    the other)."""
    realize = sch.get_realize(block)
    outs = output_buffers(realize.block)
    check_sole_writer(sch, realize, "compute_root")
    carried = iter_predicate(sch, block, "compute_root")
    detach(sch, block)
    nest = nest_over(realize, {}, Analyzer(), carried)
    root = sch.root_block()
    body = insert_in_body(root.body, nest, before_reader_of=set(outs))
    children = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    inputs = {r.buffer for r in realize.block.reads}
    late = [c for c in children[next(k for k, c in enumerate(children) if c is nest) + 1:] if writes_buffer(c, inputs)]
    if late:
        raise ScheduleError(
            f"compute_root: block {realize.block.name!r} reads {', '.join(sorted(b.name for b in inputs))}, "
            f"which is written at or after the first top-level nest that reads its output "
            f"{', '.join(sorted(b.name for b in outs))}; no place at the top level comes after the writes and "
            f"before the reads")
    sch.set_root(replace(root, body=body))
