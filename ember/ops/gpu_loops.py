"""Loop-IR helpers for operators whose compute is a GPU kernel written as a statement
(ember.ops.flash_attention): loops bound to the block's threads, serial loops, and the index of a
block's (batch...) number in a tensor that broadcasts over the batch, and sizes that may be
symbolic (a sequence's length), and an attention's operands in either layout of its heads."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class HeadRows:
    """An attention's operand (or result) as a kernel reads it: a row of a (batch..., head) is
    `at(index, row, col)` whether the heads come first, (..., H, S, D), or after the rows,
    (..., S, H, D) (`bshd`: a linear layer's output split into heads, read where it is, each row
    of a head at a stride of the whole token's), the heads counted from `first` (a packed QKV
    projection's output read in place as q, k and v: ember.passes.fold_qkv_split)."""

    buf: Buffer
    bshd: bool = False
    first: int = 0

    def at(self, index: list[PrimExpr], row, col) -> tuple[PrimExpr, ...]:
        if not self.bshd:
            return at(index, self.buf, row, col)
        full = [*index[:-1], row, index[-1] + self.first, col]
        return tuple(convert(x) for x in broadcast_index(full, self.buf.shape))

    @property
    def rows(self) -> int | PrimExpr:
        return extent(self.buf.shape[-3 if self.bshd else -2])

    @property
    def width(self) -> int:
        return as_int(self.buf.shape[-1])

    @property
    def batch(self) -> list[int | PrimExpr]:
        """The (batch..., heads) its rows are grouped by (for the result: the kernel's grid)."""
        shape = self.buf.shape
        return [extent(d) for d in ((*shape[:-3], shape[-2]) if self.bshd else shape[:-2])]
