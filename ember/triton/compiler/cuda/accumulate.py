"""A Tensor Core dot's accumulator kept in fragments across a loop, rewritten once the kernel is
emitted.

In a loop whose dots are the only accesses to their accumulator (Triton's `acc = tl.dot(a, b,
acc)` over K), each warp keeps its fragments of it in registers for the whole loop: loaded once
before it, multiplied into by each step, stored back once after it (`_in_registers`); `acc +=
tl.dot(a, b)` is first folded into a dot into acc, as Triton does (`_accumulate_in_place`). Where
acc was just zeroed (`tl.zeros` before the loop), the fragments start at zero instead of being
loaded, and the zeros are not written (`_zero_entries`): acc's shared block is then touched after
the loop alone, and may share its memory with the loop's operand tiles (lifetimes.py). The dots'
statements are found by their marks (dot.py's DOT, COPY and ZERO), which this rewrite drops.
"""

from __future__ import annotations

from dataclasses import replace

from ....tir.expr import Buffer, BufferLoad
from ....tir.functor import collect, mutate_stmt, touches
from ....tir.stmt import BufferStore, CallRoutine, For, SeqStmt, Stmt, seq
from ....tir.structural import structural_key
from .dot import COPY, DOT, ZERO, Dots, zero_fragment
from .rewrite import flat, replaced, touched_besides
from .threads import SPREAD

ENTRY = "tile_dot_entry"  # the load of a loop's accumulator into fragments before it: the first dot's index


def _in_turn(body: Stmt, dot: Stmt, add: Stmt, acc: Buffer) -> bool:
    """Whether dot and add are statements of one sequence, in this order, with none between them
    touching acc (the dot may then write acc where add did)."""
    for block in collect(body, lambda x: isinstance(x, SeqStmt) and any(y is dot for y in x.stmts)):
        at = {id(y): i for i, y in enumerate(block.stmts)}
        j, k = at[id(dot)], at.get(id(add))
        return k is not None and j < k and not any(touches(y, acc) for y in block.stmts[j + 1:k])
    return False


class Accumulators(Dots):
    """The rewrites of the kernel's body that keep dots' accumulators in fragments (the module
    doc)."""

    def _marked(self, body: Stmt, key: int) -> tuple[list[For], list[For]]:
        """The statements of dot `key` in body: its product, its copies."""
        return (collect(body, lambda x: isinstance(x, For) and x.annotation(DOT) == key),
                collect(body, lambda x: isinstance(x, For) and x.annotation(COPY) == key))

    def _accumulate_in_place(self, body: Stmt) -> Stmt:
        """body with each `acc += tl.dot(a, b)` a dot into acc itself, as `acc = tl.dot(a, b, acc)`
        is (Triton folds the sum into the dot too): the dot's own block, zeroed before it and
        added to acc after it, touched nowhere else, is dropped (so that `_in_registers` may keep
        acc in fragments)."""
        for key, (a, b, d, m, n, k) in enumerate(self._dots):
            dot, copies = self._marked(body, key)
            users = [x for x in collect(body, lambda x: isinstance(x, For) and x.annotation(SPREAD) is not None)
                     if touches(x, d)]
            if len(dot) != 1 or len(users) != 1 or self._dots_into(d) != 1:
                continue
            (add,) = users
            acc = self._sum_into(add, d)
            if acc is None or not self._zero_start(copies) or not _in_turn(body, dot[0], add, acc) or touched_besides(
                    body, (add, dot[0], *copies), d):
                continue
            self._dots[key] = (a, b, acc, m, n, k)
            into = self._tensor_cores(a, b, acc, m, n, k, False)
            self._dots.pop()  # (the new statements' entry: they keep the dot's key)
            self.allocs.remove(self._frags[key])
            self._frags[key] = self._frags.pop(len(self._dots))
            into = [replace(x, annotations=tuple((p, key if p in (DOT, COPY) else v) for p, v in x.annotations))
                    for x in into]
            body = replaced(body, {**dict.fromkeys((add, *copies), SeqStmt(())), dot[0]: SeqStmt(tuple(into))})
            self.allocs.remove(d)
        return body

    def _dots_into(self, c: Buffer) -> int:
        """How many Tensor Core dots write c."""
        return sum(x[2] is c for x in self._dots)

    def _zero_start(self, copies: list[For]) -> bool:
        """Whether a dot's copies (its load or fill, its store) start its fragments at zero."""
        return any(x.annotation(ZERO) for x in copies)

    def _sum_into(self, add: For, d: Buffer) -> Buffer | None:
        """acc where `add` is acc[e] = acc[e] + d[e] at its own elements e, else None."""
        _, flat, _, _ = self._spreads[add.annotation(SPREAD)]
        stores = collect(add, lambda x: isinstance(x, BufferStore | CallRoutine))
        if len(stores) != 1 or not isinstance(stores[0], BufferStore):
            return None
        acc = stores[0].buffer
        want = BufferLoad(acc, (flat,), acc.dtype) + BufferLoad(d, (flat,), d.dtype)
        same = structural_key(stores[0].indices[0]) == structural_key(flat)
        return acc if same and structural_key(stores[0].value) == structural_key(want) else None

    def _in_registers(self, body: Stmt) -> Stmt:
        """body with each serial loop whose Tensor Core dots are the only accesses to their
        accumulator (Triton's `acc = tl.dot(a, b, acc)` over K) keeping that accumulator in
        fragments for the whole loop: each warp loads its tiles of it before the loop, each dot
        multiplies into them, and they are stored back once after it. Other dots keep theirs in
        shared memory."""
        marks = (DOT, COPY, ZERO, ENTRY)

        def unmarked(x):
            if isinstance(x, For) and any(p[0] in marks for p in x.annotations):
                return replace(x, annotations=tuple(p for p in x.annotations if p[0] not in marks))
            return None

        body = mutate_stmt(body, f_stmt=lambda x: self._hoisted(x) if isinstance(x, For) and x.kind == "serial"
                           else None)
        return mutate_stmt(self._zero_entries(body), f_stmt=unmarked)

    def _zero_entries(self, body: Stmt) -> Stmt:
        """body with each accumulator that a loop keeps in fragments, and that was zeroed before
        the loop with nothing touching it in between, started at zero in its fragments: the zeros
        not written, the fragments not loaded (`acc = tl.zeros(...)` then the K loop)."""
        stmts = flat(body)
        table: dict[Stmt, Stmt] = {}
        for i, s in enumerate(stmts):
            key = s.annotation(ENTRY) if isinstance(s, For) else None
            if key is None:
                continue
            _, _, c, m, n, _ = self._dots[key]
            j = i - 1
            while j >= 0 and not touches(stmts[j], c):
                j -= 1
            zero = stmts[j] if j >= 0 else None
            if not (isinstance(zero, For) and zero.annotation(SPREAD) is not None and self._zeroes(zero, c)):
                continue
            ldf = self._fragment_shape(m, n)[1]
            table[zero] = SeqStmt(())
            table[s] = mutate_stmt(s, f_stmt=lambda x, ldf=ldf: zero_fragment(x.writes[0], ldf)
                                   if isinstance(x, CallRoutine) else None)
        return replaced(body, table) if table else body

    def _hoisted(self, loop: For) -> Stmt | None:
        marked = collect(loop.body, lambda x: isinstance(x, For) and x.annotation(DOT) is not None)
        by_acc: dict[Buffer, list[For]] = {}
        for x in marked:
            by_acc.setdefault(self._dots[x.annotation(DOT)][2], []).append(x)
        before, after, moved = [], [], {}
        for c, dots in by_acc.items():
            copies = [y for d in dots for y in self._marked(loop.body, d.annotation(DOT))[1]]
            if any(self._zero_start(self._marked(loop.body, d.annotation(DOT))[1]) for d in dots) or touched_besides(
                    loop.body, (*dots, *copies), c):
                continue  # (a dot from zero each iteration, or c touched elsewhere in the loop)
            frag, load, store = self._fragments(c, *self._dots[dots[0].annotation(DOT)][3:5])
            before.append(replace(load, annotations=(*load.annotations, (ENTRY, dots[0].annotation(DOT)))))
            after.append(store)
            moved.update({d: self._fragment_dot(d.annotation(DOT), frag) for d in dots})
            moved.update(dict.fromkeys(copies, SeqStmt(())))
            for d in dots:  # (each dot's own fragments, which the loop's replace)
                self.allocs.remove(self._frags[d.annotation(DOT)])
        if not moved:
            return None
        return seq(*before, replace(loop, body=replaced(loop.body, moved)), *after)
