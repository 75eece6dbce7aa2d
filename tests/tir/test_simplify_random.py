"""The arithmetic simplifier on random index expressions: every result keeps its value at points
within the variables' bounds (simplify_check's reference evaluator), bounds hold, proofs are true,
linear expressions do not grow, vector rules keep every lane."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from simplify_check import evaluate, n, size, text, x, y

from ember.tir.arith import Analyzer
from ember.tir.expr import Broadcast, Ramp, Var, binary, const, select

z32 = Var("z32", "int32")
VARS = (x, y, z32)  # an int32 variable brings casts to int64 along
_ARITH = ("+", "-", "*", "//", "%", "min", "max", "select", "split", "fuse")
_CMPS = ("<", "<=", ">", ">=", "==", "!=")


def draw_expr(data, vars_, positive, depth):
    """A random index expression; divisors are nonzero constants or positive variables."""
    if depth == 0 or data.draw(st.integers(0, 3)) == 0:
        if data.draw(st.booleans()):
            return data.draw(st.sampled_from(vars_))
        return const(data.draw(st.integers(-8, 8)))
    op = data.draw(st.sampled_from(_ARITH))
    a = draw_expr(data, vars_, positive, depth - 1)
    if op in ("//", "%", "split", "fuse"):
        d = draw_divisor(data, positive)
    if op in ("//", "%"):
        return binary(op, a, d)
    b = draw_expr(data, vars_, positive, depth - 1)
    if op == "split":  # c*((a // d)*d + a % d), as a split loop indexes
        c = const(data.draw(st.integers(-3, 3)))
        return binary("+", binary("*", binary("//", a, d), d * c), binary("%", a, d) * c)
    if op == "fuse":  # (a*d + b) // d or % d, as a fused loop indexes
        return binary(data.draw(st.sampled_from(["//", "%"])), a * d + b, d)
    if op == "*" and data.draw(st.booleans()):
        b = const(data.draw(st.integers(-4, 8)))
    if op == "select":
        return select(draw_cond(data, vars_, positive, depth - 1), a, b)
    return binary(op, a, b)


def draw_divisor(data, positive):
    """A positive constant or variable, now and then a negative constant."""
    if positive and data.draw(st.booleans()):
        return data.draw(st.sampled_from(positive))
    c = data.draw(st.integers(-9, 9).filter(lambda v: v != 0))
    return const(c if data.draw(st.integers(0, 4)) == 0 else abs(c))


def draw_cond(data, vars_, positive, depth):
    op = data.draw(st.sampled_from(_CMPS))
    c = binary(op, draw_expr(data, vars_, positive, depth), draw_expr(data, vars_, positive, depth))
    match data.draw(st.integers(0, 4)):
        case 0:
            return ~c
        case 1:
            return binary("&&", c, draw_cond(data, vars_, positive, 0))
        case 2:
            return binary("||", c, draw_cond(data, vars_, positive, 0))
    return c


def draw_env(data, ana):
    bounds = {}
    for v in VARS:
        lo = data.draw(st.integers(-12, 12))
        hi = lo + data.draw(st.integers(0, 24))
        ana.bind(v, lo, hi)
        bounds[v] = (lo, hi)
    points = [{v: lo for v, (lo, _) in bounds.items()}, {v: hi for v, (_, hi) in bounds.items()}]
    points += [{v: data.draw(st.integers(lo, hi)) for v, (lo, hi) in bounds.items()} for _ in range(6)]
    return bounds, points


def check_same(e, ana, points):
    s = ana.simplify(e)
    assert s.dtype == e.dtype
    for p in points:
        assert evaluate(s, p) == evaluate(e, p), f"{e}  ->  {s}  at {p}"
    return s


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_expressions_keep_their_value(data):
    ana = Analyzer()
    bounds, points = draw_env(data, ana)
    positive = [v for v, (lo, _) in bounds.items() if lo > 0]
    e = draw_expr(data, VARS, positive, 4)
    s = check_same(e, ana, points)
    assert ana.simplify(s) is s or text(ana.simplify(s)) == text(s)  # idempotent
    lo, hi = ana.const_int_bound(e)
    for p in points:
        v = evaluate(e, p)
        assert (lo is None or lo <= v) and (hi is None or v <= hi), f"{e} = {v} outside [{lo}, {hi}]"
    c = draw_cond(data, VARS, positive, 3)
    check_same(c, ana, points)
    for claim, truth in ((c, True), (~c, False)):
        if ana.can_prove(claim):
            assert all(bool(evaluate(c, p)) == truth for p in points), f"can_prove({claim}) is wrong"


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_symbolic_ranges(data):
    """y in [0, n) for a symbolic n: fuse/split patterns over a variable extent."""
    ana = Analyzer()
    ana.bind_range(n, 1, 12)
    ana.bind_range(y, 0, n)
    ana.bind(x, 0, 6)
    vs = (x, y, n)
    patterns = [x * n + y, x * n + y + n * 2, y, y + 1, n - y, x]
    e = binary(
        data.draw(st.sampled_from(["//", "%", "<", "<=", "min", "max", "=="])),
        data.draw(st.sampled_from(patterns)) if data.draw(st.booleans()) else draw_expr(data, vs, [n], 2),
        data.draw(st.sampled_from([n, n * 2, n + 1, y + 1, const(3)])),
    )
    points = []
    for _ in range(8):
        nv = data.draw(st.integers(1, 12))
        points.append({n: nv, y: data.draw(st.integers(0, nv - 1)), x: data.draw(st.integers(0, 6))})
    check_same(e, ana, points)


def _linear(data, depth):
    if depth == 0 or data.draw(st.integers(0, 2)) == 0:
        match data.draw(st.integers(0, 2)):
            case 0:
                return const(data.draw(st.integers(-5, 5)))
            case 1:
                return data.draw(st.sampled_from(VARS)) * data.draw(st.integers(-3, 3))
        return data.draw(st.sampled_from(VARS))
    op = data.draw(st.sampled_from(["+", "-"]))
    return binary(op, _linear(data, depth - 1), _linear(data, depth - 1))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_linear_expressions_do_not_grow(data):
    ana = Analyzer()
    _, points = draw_env(data, ana)
    e = _linear(data, 5)
    s = check_same(e, ana, points)
    assert size(s) <= size(e), f"{e}  ->  {s}"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_vector_rules(data):
    ana = Analyzer()
    bounds, points = draw_env(data, ana)
    lanes = data.draw(st.sampled_from([2, 4, 8]))
    vt = f"int64x{lanes}"

    def vec():
        scalar = draw_expr(data, (x, y), [], 2)
        if data.draw(st.booleans()):
            return Broadcast(scalar, lanes, vt)
        return Ramp(scalar, const(data.draw(st.integers(-3, 4))), lanes, vt)

    op = data.draw(st.sampled_from(["+", "-", "*", "//", "%", "<", "min"]))
    a = vec()
    divisor = op in ("//", "%") or data.draw(st.booleans())
    b = Broadcast(const(data.draw(st.integers(1, 9))), lanes, vt) if divisor else vec()
    e = binary(op, a, b)
    check_same(e, ana, points)
    # the split-then-vectorize pattern: ramp(i*c, 1, lanes) // c is a broadcast
    c = lanes * data.draw(st.integers(1, 3))
    r = Ramp(x * c, const(1), lanes, vt)
    assert isinstance(check_same(binary("//", r, Broadcast(const(c), lanes, vt)), ana, points), Broadcast)
    assert isinstance(check_same(binary("%", r, Broadcast(const(c), lanes, vt)), ana, points), Ramp)
    # a transpose's flattened index: the base a multiple of the lanes, the divisor of c * 3 (a row)
    r = Ramp(x * lanes, const(1), lanes, vt)
    assert isinstance(check_same(binary("//", r, Broadcast(const(3 * c), lanes, vt)), ana, points), Broadcast)
    assert isinstance(check_same(binary("%", r, Broadcast(const(3 * c), lanes, vt)), ana, points), Ramp)
