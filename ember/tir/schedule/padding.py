"""pad_einsum: a product's iteration space padded to multiples of its tiles, with zeros, so that
a schedule whose tiles do not divide the shape keeps whole tiles (TVM's pad_einsum).

    C[i, j] += A[i, k] * B[k, j]   over (M, N, K)
->  A_pad[i, k] = A[i, k] if i < M and k < K else 0            over (M', K')
    B_pad[k, j] = B[k, j] if k < K and j < N else 0            over (K', N')
    C_pad[i, j] += A_pad[i, k] * B_pad[k, j]                   over (M', N', K')
    C[i, j] = C_pad[i, j]                                      over (M, N)

The padded terms of the sum are products with a zero factor, so C is unchanged; the rows and
columns of C_pad past C's are computed and never copied out. A buffer with no padded dimension
is read as it is, and C is written directly when none of its dimensions is padded. A factor
computed from its load (round_tf32(A[i, k]): an operand's prologue, inlined) is computed in its
pad block, padded or not, so that the product reads plain loads (what a tensor intrinsic's
description reads) and the zeros past the ends are zeros whatever the function makes of 0. The pad
blocks are meant to be inlined into the copies that stage the operands (cache_read into shared
memory: the zeros written as the tile is copied), and the last copy into C's reader (its
epilogue).

An extent may be symbolic (a model's sequence length): it is padded to the next multiple of its
tile as an expression of the sizes, ceil(M / p) * p, and the loads past its end read as zeros as
the static ones do; a symbolic reduction's is at least one tile (ceil(max(K, 1) / p) * p: a sum
over K = 0 is a tile of zeros, so that sums reset in the K loop's first iteration are reset).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..expr import Binary, Buffer, BufferLoad, Cast, Var, all_, as_int, const, is_const, max_, select
from ..expr_functor import mutate_expr
from ..functor import free_vars, mutate_stmt, visit_expr
from ..region import with_regions
from ..stmt import Block, BlockRealize, BufferStore, For, IterVar, Range, Stmt, seq
from .nest import exclusive_top, names_in_use
from .registry import primitive
from .state import BlockRV, Schedule, replace_stmt


@primitive
def pad_einsum(sch: Schedule, block: BlockRV, padding: list[int]) -> None:
    """Pad `block`, a sum of products (C[...] = C[...] + x * y, casts allowed around the factors),
    each factor a load or an elementwise function of one load, to multiples of `padding` (one per
    iteration variable, in the block's order) as the module doc shows. Every load's indices are
    the block's iteration variables or constants; the block is in a loop nest of its own at the
    top of the function."""
    realize = sch.get_realize(block)
    blk = realize.block
    where = f"pad_einsum: block {blk.name!r}"
    if len(padding) != len(blk.iter_vars) or any(not isinstance(p, int) or p < 1 for p in padding):
        raise ScheduleError(f"{where} has {len(blk.iter_vars)} iteration variables; padding {padding} must give a "
                            "positive multiple for each")
    if not all(is_const(iv.dom.min, 0) for iv in blk.iter_vars):
        raise ScheduleError(f"{where} has an iteration domain that does not start at 0")
    if not is_const(realize.predicate, True):
        raise ScheduleError(f"{where} has the predicate {realize.predicate}")
    factors, store = _product(blk, where)
    grown = {iv.var: g for iv, p in zip(blk.iter_vars, padding)
             if (g := _grown(iv.dom.extent, p, iv.kind == "reduce")) is not iv.dom.extent}
    if not grown and all(f is ld for f, ld in factors):
        return
    for iv in blk.iter_vars:
        if iv.kind == "reduce" and iv.var in grown and not any(any(i is iv.var for i in ld.indices)
                                                               for _, ld in factors):
            raise ScheduleError(f"{where}: no factor of the product is zero past the end of {iv.var.name} "
                                "(one of them must be read at it)")
    top = exclusive_top(sch.block_path(block))
    root = sch.root_block()
    if top not in (root.body.stmts if hasattr(root.body, "stmts") else (root.body,)):
        raise ScheduleError(f"{where} is not in a loop nest of its own at the top of the function")
    taken = names_in_use(sch)
    pads, nests = {}, []  # a factor -> the load of its pad buffer
    for f, ld in factors:
        if f is ld and not any(i in grown for i in ld.indices if isinstance(i, Var)):
            continue
        pad = _buffer(ld.buffer, ld.indices, grown, taken, f.dtype)
        pads[f] = BufferLoad(pad, ld.indices, f.dtype)
        nests.append(_zero_padded_copy(f, ld, pad))
    out = store.buffer
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "spatial"]
    out_pad = _buffer(out, store.indices, grown, taken) if any(v in grown for v in spatial) else None
    ivs = tuple(replace(iv, dom=Range(const(0), grown[iv.var])) if iv.var in grown else iv
                for iv in blk.iter_vars)
    nests.append(_nest(with_regions(replace(_redirect(blk, pads, out, out_pad), iter_vars=ivs))))
    if out_pad is not None:
        unpad = f"{out.name}_unpad"
        if unpad in taken:
            raise ScheduleError(f"pad_einsum: a block named {unpad!r} exists already")
        nests.append(_copy(unpad, out, out.shape, lambda idx: BufferLoad(out_pad, idx, out.dtype)))
    body = replace_stmt(root.body, top, seq(*nests))
    made = tuple(ld.buffer for ld in pads.values()) + ((out_pad,) if out_pad is not None else ())
    sch.set_root(replace(root, body=body, alloc_buffers=root.alloc_buffers + made))


def _grown(extent, p: int, reduce: bool = False):
    """`extent` padded to a multiple of p: a constant where it is static (the extent itself, the
    same object, where p divides it), else ceil(extent / p) * p; a symbolic reduction's at least
    one p (a sum over none is one tile of zeros, so that a schedule that resets its sums in the
    loop's first iteration, as Tensor Cores' fragments are, still resets them)."""
    n = as_int(extent)
    if n is not None:
        return extent if n % p == 0 else const(-(-n // p) * p)
    if p == 1:
        return extent
    return (max_(extent, const(1, extent.dtype)) + (p - 1)) // p * p if reduce else (extent + (p - 1)) // p * p


def _product(blk: Block, where: str):
    """The factors of the block's update (each stripped of its casts), each with its one load, and
    the block's store."""
    store = blk.body
    if (blk.init is None or not isinstance(store, BufferStore) or not isinstance(store.value, Binary)
            or store.value.op != "+" or not _loads_its_output(store.value.a, store)):
        raise ScheduleError(f"{where} is not a sum C = C + x * y")
    ivars = {iv.var for iv in blk.iter_vars}
    factors = [(f, _one_load(f, ivars)) for f in _factors(store.value.b)]
    if len(factors) < 2 or any(ld is None for _, ld in factors):
        raise ScheduleError(f"{where}: its update is not a product of loads or functions of one load (casts "
                            "allowed)")
    if len({ld.buffer for _, ld in factors}) < len(factors):
        raise ScheduleError(f"{where}: two factors read one buffer")
    for _, ld in factors:
        if any(not (isinstance(i, Var) and i in ivars) and as_int(i) is None for i in ld.indices):
            raise ScheduleError(f"{where}: each factor must read its own buffer at iteration variables or "
                                f"constants, not {ld.buffer.name}{list(ld.indices)}")
    return factors, store


def _loads_its_output(e, store: BufferStore) -> bool:
    return (isinstance(e, BufferLoad) and e.buffer is store.buffer
            and all(a is b for a, b in zip(e.indices, store.indices)))


def _factors(e) -> list:
    while isinstance(e, Cast):
        e = e.value
    if isinstance(e, Binary) and e.op == "*":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _one_load(f, ivars):
    """f's load where f is a load, or a function of one element (loaded once or more, at the
    same indices) and of nothing else the block varies over; else None."""
    loads = []
    visit_expr(f, lambda e: loads.append(e) if isinstance(e, BufferLoad) else None)
    if not loads or any(x.buffer is not loads[0].buffer or not _same_indices(x, loads[0]) for x in loads):
        return None
    rest = mutate_expr(f, lambda e: const(0, e.dtype) if isinstance(e, BufferLoad) else None)
    return None if free_vars(rest) & ivars else loads[0]


def _same_indices(x: BufferLoad, y: BufferLoad) -> bool:
    return all(a is b or (as_int(a) is not None and as_int(a) == as_int(b)) for a, b in zip(x.indices, y.indices))


def _buffer(buf: Buffer, indices, grown: dict, taken: set, dtype: str | None = None) -> Buffer:
    name = f"{buf.name}_pad"
    if name in taken:
        raise ScheduleError(f"pad_einsum: a block or buffer named {name!r} exists already")
    shape = tuple(grown[i] if isinstance(i, Var) and i in grown else d for i, d in zip(indices, buf.shape))
    return Buffer(name, shape, dtype or buf.dtype, buf.scope)


def _zero_padded_copy(f, ld: BufferLoad, pad: Buffer) -> Stmt:
    """pad = the factor f (of its load ld) where inside the source, else 0 (a dimension not
    padded, such as a broadcast one read at a constant, is copied whole)."""
    src = ld.buffer

    def value(idx):
        at = tuple(v if isinstance(i, Var) else i for v, i in zip(idx, ld.indices))
        e = mutate_expr(f, lambda x: BufferLoad(src, at, src.dtype) if isinstance(x, BufferLoad) else None)
        inside = [v < n for v, n, g in zip(idx, src.shape, pad.shape) if g is not n]
        return select(all_(*inside), e, const(0, f.dtype)) if inside else e

    return _copy(pad.name, pad, pad.shape, value)


def _copy(name: str, dst: Buffer, shape, value) -> Stmt:
    """A block `name` storing value(index) into dst over `shape` (extents, static or symbolic),
    in loops of its own."""
    ivs = tuple(IterVar(Var(f"v{d}"), Range(const(0), n), "spatial") for d, n in enumerate(shape))
    idx = tuple(iv.var for iv in ivs)
    return _nest(with_regions(Block(name, ivs, (), (), BufferStore(dst, value(idx), idx))))


def _nest(block: Block) -> Stmt:
    loop_vars = [Var(f"{iv.var.name}_l") for iv in block.iter_vars]
    body: Stmt = BlockRealize(tuple(loop_vars), const(True), block)
    for v, iv in reversed(list(zip(loop_vars, block.iter_vars))):
        body = For(v, const(0), iv.dom.extent, "serial", body)
    return body


def _redirect(block: Block, pads: dict, out: Buffer, out_pad: Buffer | None) -> Block:
    """The block reading each factor in `pads` from its pad buffer, and writing out_pad for out."""
    def on_expr(e):
        if e in pads:
            return pads[e]
        if out_pad is not None and isinstance(e, BufferLoad) and e.buffer is out:
            return BufferLoad(out_pad, e.indices, e.dtype)
        return None

    def on_stmt(s):
        if out_pad is not None and isinstance(s, BufferStore) and s.buffer is out:
            return BufferStore(out_pad, s.value, s.indices)
        return None

    return mutate_stmt(block, f_stmt=on_stmt, f_expr=on_expr)
