"""Readable, Python-like text of the loop IR (what `ember.lower` prints).

It is what str() and repr() of an expression, a statement and a function give: this module
attaches them to the node classes (at its end), since they sit below it; the package
(ember/tir/__init__.py) imports it, so any import of the loop IR has them.
"""

from __future__ import annotations

from .expr import Binary, Broadcast, BufferLoad, Call, Cast, Const, Not, PrimExpr, Ramp, Select, Var
from .functor import visit_stmt
from .stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    While,
)

_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "|": 4, "^": 5, "&": 6,
         "+": 7, "-": 7, "*": 8, "/": 8, "//": 8, "%": 8}
_PY_OP = {"&&": "and", "||": "or"}


_block_var_names: dict = {}  # while printing a function: block iteration variables -> "v" + name


def expr_to_str(e: PrimExpr, prec: int = 0) -> str:
    match e:
        case Var(name):
            return _block_var_names.get(e, name)
        case Const(value, dtype):
            if dtype in ("int64", "bool"):
                return str(value)
            if dtype == "float32":
                return repr(float(value))
            return f"{dtype}({value!r})"
        case Binary(("min" | "max") as op, a, b, _):
            return f"{op}({expr_to_str(a)}, {expr_to_str(b)})"
        case Binary(op, a, b, _):
            p = _PREC[op]
            s = f"{expr_to_str(a, p)} {_PY_OP.get(op, op)} {expr_to_str(b, p + 1)}"
            return f"({s})" if p < prec else s
        case Not(a, _):
            return f"not {expr_to_str(a, 9)}"
        case Select(c, t, f, _):
            return f"select({expr_to_str(c)}, {expr_to_str(t)}, {expr_to_str(f)})"
        case Cast(dtype, v):
            return f"{dtype}({expr_to_str(v)})"
        case Call(name, args, _):
            return f"{name}({', '.join(expr_to_str(a) for a in args)})"
        case BufferLoad(buf, idx, _):
            return f"{buf.name}[{', '.join(expr_to_str(i) for i in idx)}]"
        case Ramp(base, stride, lanes, _):
            return f"ramp({expr_to_str(base)}, {expr_to_str(stride)}, {lanes})"
        case Broadcast(v, lanes, _):
            return f"broadcast({expr_to_str(v)}, {lanes})"
    return f"<{type(e).__name__}>"


def _range(r: Range) -> str:
    if isinstance(r.extent, Const) and r.extent.value == 1:
        return expr_to_str(r.min)
    return f"{expr_to_str(r.min)}:{expr_to_str(r.min + r.extent)}"


def stmt_to_str(s: Stmt, indent: int = 0) -> str:
    lines: list[str] = []
    _emit(s, indent, lines)
    return "\n".join(lines)


def _emit(s: Stmt, ind: int, out: list[str]) -> None:
    pad = "    " * ind
    match s:
        case For(v, mn, ext, kind, body, ann):
            rng = expr_to_str(ext) if isinstance(mn, Const) and mn.value == 0 else (
                f"{expr_to_str(mn)}, {expr_to_str(mn + ext)}")
            how = "range" if kind == "serial" else kind
            extra = "".join(f", {k}={v!r}" for k, v in ann)
            out.append(f"{pad}for {expr_to_str(v)} in {how}({rng}{extra}):")
            _emit(body, ind + 1, out)
        case SeqStmt(stmts):
            for x in stmts:
                _emit(x, ind, out)
        case BufferStore(buf, val, idx):
            out.append(f"{pad}{buf.name}[{', '.join(expr_to_str(i) for i in idx)}] = {expr_to_str(val)}")
        case IfThenElse(c, t, e):
            out.append(f"{pad}if {expr_to_str(c)}:")
            _emit(t, ind + 1, out)
            if e is not None:
                out.append(f"{pad}else:")
                _emit(e, ind + 1, out)
        case While(c, body):
            out.append(f"{pad}while {expr_to_str(c)}:")
            _emit(body, ind + 1, out)
        case Evaluate(v):
            out.append(f"{pad}{expr_to_str(v)}")
        case CallRoutine(routine, params, reads, writes, scalars):
            args = [f"{p.buffer.name} + {expr_to_str(p.offset)}" for p in reads + writes]
            args += [expr_to_str(x) for x in scalars] + [f"{k}={v!r}" for k, v in params]
            out.append(f"{pad}routine.{routine}({', '.join(args)})")
        case Allocate(buf, body):
            shape = ", ".join(expr_to_str(d) for d in buf.shape)
            out.append(f"{pad}{buf.name} = alloc(({shape}), {buf.dtype!r}, scope={buf.scope!r})")
            _emit(body, ind, out)
        case BlockRealize(vals, pred, block):
            _emit_block(block, vals, pred, ind, out)
        case Block():
            _emit_block(s, None, None, ind, out)
        case _:
            out.append(f"{pad}<{type(s).__name__}>")


def _emit_block(b: Block, vals, pred, ind: int, out: list[str]) -> None:
    pad = "    " * ind
    out.append(f'{pad}with block("{b.name}"):')
    inner = pad + "    "
    for buf in b.alloc_buffers:
        shape = ", ".join(expr_to_str(d) for d in buf.shape)
        out.append(f"{inner}{buf.name} = alloc_buffer(({shape}), {buf.dtype!r}, scope={buf.scope!r})")
    if vals is not None:
        for iv, v in zip(b.iter_vars, vals):
            kind = "S" if iv.kind == "spatial" else "R"
            dom = expr_to_str(iv.dom.extent) if isinstance(iv.dom.min, Const) and iv.dom.min.value == 0 else (
                f"({expr_to_str(iv.dom.min)}, {expr_to_str(iv.dom.min + iv.dom.extent)})")
            out.append(f"{inner}{expr_to_str(iv.var)} = axis.{kind}({dom}, {expr_to_str(v)})")
        if pred is not None and not (isinstance(pred, Const) and pred.value is True):
            out.append(f"{inner}where({expr_to_str(pred)})")
    if b.reads or b.writes:
        rd = ", ".join(f"{r.buffer.name}[{', '.join(_range(x) for x in r.region)}]" for r in b.reads)
        wr = ", ".join(f"{r.buffer.name}[{', '.join(_range(x) for x in r.region)}]" for r in b.writes)
        out.append(f"{inner}reads({rd})")
        out.append(f"{inner}writes({wr})")
    if b.init is not None:
        out.append(f"{inner}with init():")
        _emit(b.init, ind + 2, out)
    _emit(b.body, ind + 1, out)


def func_to_str(f: PrimFunc) -> str:
    params = ", ".join(
        f"{b.name}: Buffer(({', '.join(expr_to_str(d) for d in b.shape)}{',' if b.ndim == 1 else ''}), {b.dtype!r})"
        for b in f.params
    )
    head = f"def {f.name}({params}):"
    names: dict = {}
    taken: set[str] = set()

    def name(v: Var, base: str):
        if v not in names:
            cand, k = base, 0
            while cand in taken:
                k += 1
                cand = f"{base}_{k}" if not base[-1].isdigit() else f"{base}{chr(96 + k)}"
            names[v] = cand
            taken.add(cand)

    def on_stmt(s):
        if isinstance(s, Block):
            for iv in s.iter_vars:
                name(iv.var, "v" + iv.var.name)
        elif isinstance(s, For):
            name(s.loop_var, s.loop_var.name)

    for b in f.params:
        for d in b.shape:
            if isinstance(d, Var):
                name(d, d.name)
    visit_stmt(f.body, on_stmt)
    _block_var_names.update(names)
    try:
        return head + "\n" + stmt_to_str(f.body, 1)
    finally:
        _block_var_names.clear()


PrimExpr.__str__ = PrimExpr.__repr__ = expr_to_str
Stmt.__str__ = Stmt.__repr__ = stmt_to_str
PrimFunc.__str__ = PrimFunc.__repr__ = func_to_str
