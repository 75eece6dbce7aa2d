"""Loop-IR helpers for operators whose compute is a GPU kernel written as a statement
(ember.ops.flash_attention): loops bound to the block's threads, serial loops, and the index of a
block's (batch...) number in a tensor that broadcasts over the batch, and sizes that may be
symbolic (a sequence's length)."""

from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import Buffer, PrimExpr, Var, as_int, const, convert
from ..tir.stmt import THREAD_BINDING, For
from .common import broadcast_index


def threads(body_of, count: int, tag: str = "threadIdx.x") -> For:
    """A loop over `count` threads bound to `tag`, its body made of the thread's index."""
    tx = Var("tx", dt.INDEX_DTYPE)
    return For(tx, const(0), const(count), THREAD_BINDING, body_of(tx), (("thread_tag", tag),))


def serial(name: str, extent, body_of) -> For:
    i = Var(name, dt.INDEX_DTYPE)
    return For(i, const(0), convert(extent), "serial", body_of(i))


def batch_index(number: PrimExpr, batch: list[int]) -> list[PrimExpr]:
    """The index in a batch of shape `batch` of its element `number` (row-major)."""
    rest, index = number, []
    for d in reversed(batch):
        index.append(rest % d)
        rest = rest // d
    return index[::-1]


def at(index: list[PrimExpr], buf: Buffer, *inner) -> tuple[PrimExpr, ...]:
    """buf's index of batch element `index` and `inner`, broadcast to buf's axes (a mask of one
    row for every query, a padding mask, reads row 0)."""
    return tuple(convert(x) for x in broadcast_index([*index, *inner], buf.shape))


def extent(d: PrimExpr) -> int | PrimExpr:
    """A buffer's size as an int where it is static (so that the kernel's arithmetic on it stays
    constant), else its expression (a symbolic length, a parameter of the kernel)."""
    n = as_int(d)
    return d if n is None else n


def ceil_div(n: int | PrimExpr, t: int) -> int | PrimExpr:
    """The number of tiles of t that cover n (static or symbolic)."""
    return -(-n // t) if isinstance(n, int) else (n + (t - 1)) // t
