"""The recurrence of lstm, gru and rnn (ember.ops.recurrent) as one loop-IR statement: the time
loop inside the kernel, each step's cell fused.

The cell equations are written once (`lstm_cell`, `gru_cell`, `ACTIVATIONS`) over a math namespace,
so the NumPy reference (`numpy_math`) and the kernel (`EXPR_MATH`, loop-IR expressions) compute
the same thing.

The kernel, for each time step s (serially):
    one parallel loop over (direction, block of BB batch rows, block of JB hidden units); each
    iteration accumulates the gate pre-activations of its block in a local (BB, gates, JB) array:
    xp's row for the step, plus h_prev @ R[d]^T as rank-1 updates along k (one h_prev element
    times a vector of JB weights of each gate: the block's weights are contiguous in rp, read
    once per step for BB batch rows), then runs the cell on its block of units, vector by vector,
    and stores y, the next h and the cell state.
The step's parallel loop is parallel when a step has PARALLEL_MIN_MACS multiply-adds or more:
below that, a fork and join per step costs more than it saves (and far more on a busy machine,
where every join waits for the slowest thread).
The hidden state alternates between two halves of one scratch buffer (h_state[s % 2] is read,
h_state[(s + 1) % 2] written), since every unit of the next state reads the whole previous one;
an lstm's cell state is updated in place in the y_c output (each unit reads only its own). A
gru without linear_before_reset needs r * h_prev whole before its h gate: it runs two parallel
loops per step, the first storing z and r * h_prev. Past a sequence's length (seq_lens) the
states are held and y is zero; a reverse direction starts at each sequence's last element; an
empty sequence ends with zero states, as in ONNX Runtime.
"""

from __future__ import annotations

import functools
import operator
from types import SimpleNamespace

import numpy as np

from ..tir.expr import Buffer, PrimExpr, Var, as_int, call, cast, const, convert, max_, min_, select
from ..tir.stmt import Allocate, BufferStore, For, Stmt, seq

# per operator (ember.ops.recurrent): gates, activation functions per direction, optional inputs in their order
CELLS = {
    "lstm": (4, 3, ("seq_lens", "h0", "c0", "p")),
    "gru": (3, 2, ("seq_lens", "h0", "rbh")),
    "rnn": (1, 1, ("seq_lens", "h0")),
}
# name -> f(x, alpha, beta, m): ONNX's activation functions of recurrent layers
ACTIVATIONS = {
    "Relu": lambda x, a, b, m: m.maximum(x, 0.0),
    "Tanh": lambda x, a, b, m: m.tanh(x),
    "Sigmoid": lambda x, a, b, m: m.sigmoid(x),
    "Affine": lambda x, a, b, m: x * a + b,
    "LeakyRelu": lambda x, a, b, m: m.where(x >= 0.0, x, x * a),
    "ThresholdedRelu": lambda x, a, b, m: m.where(x > a, x, x * 0.0),
    "ScaledTanh": lambda x, a, b, m: m.tanh(x * b) * a,
    "HardSigmoid": lambda x, a, b, m: m.minimum(m.maximum(x * a + b, 0.0), 1.0),
    "Elu": lambda x, a, b, m: m.where(x >= 0.0, x, (m.exp(x) - 1.0) * a),
    "Softsign": lambda x, a, b, m: x / (m.abs(x) + 1.0),
    "Softplus": lambda x, a, b, m: m.maximum(x, 0.0) + m.log1p(m.exp(-m.abs(x))),
}
# the (alpha, beta) an activation takes when the model gives none (ONNX Runtime's)
DEFAULT_PARAMS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, 0.0), "ThresholdedRelu": (1.0, 0.0),
                  "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0)}


def numpy_math() -> SimpleNamespace:
    def sigmoid(x):
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-x))

    return SimpleNamespace(tanh=np.tanh, sigmoid=sigmoid, exp=np.exp, log1p=np.log1p, abs=np.abs,
                           maximum=np.maximum, minimum=np.minimum, where=np.where)


EXPR_MATH = SimpleNamespace(
    tanh=lambda x: call("tanh", x), sigmoid=lambda x: call("sigmoid", x), exp=lambda x: call("exp", x),
    log1p=lambda x: call("log1p", x), abs=lambda x: call("abs", x), maximum=max_, minimum=min_, where=select)


def activation(triple, m):
    """The activation function of a (name, alpha, beta) triple over the math namespace m."""
    name, alpha, beta = triple
    return lambda x: ACTIVATIONS[name](x, alpha, beta, m)


def clipper(clip, m):
    if clip is None:
        return lambda x: x
    return lambda x: m.minimum(m.maximum(x, -float(clip)), float(clip))


def lstm_cell(a, c_prev, peep, f, g, h, clip, input_forget):
    """(h, c) from the pre-activations a = (i, o, f, c) (xp's and h_prev @ R's), the previous cell
    state and the peepholes (pi, po, pf) or None."""
    ai, ao, af, ac = a
    if peep is not None:
        ai, af = ai + peep[0] * c_prev, af + peep[2] * c_prev
    i = f(clip(ai))
    forget = 1.0 - i if input_forget else f(clip(af))
    c = forget * c_prev + i * g(clip(ac))
    if peep is not None:
        ao = ao + peep[1] * c
    return f(clip(ao)) * h(c), c


def gru_cell(z, hh, h_prev):
    """The next state from the update gate z and the candidate hh."""
    return (1.0 - z) * hh + z * h_prev


# -- the kernel ---------------------------------------------------------------------------------

MAX_ACC = 256  # elements of the local accumulator array of one block (BB * gates * JB): 16 registers
# about 10 us of one core: a step of one hidden-256 LSTM layer at batch 1 (0.71 -> 0.45 ms per
# 64 steps on 2 threads, busy machine); below it a fork and join per step cost what they save
PARALLEL_MIN_MACS = 1 << 18


def hidden_block(hidden: int) -> int:
    """JB: the hidden units of one block, a vector width that divides H where one does."""
    return next((w for w in (16, 8, 4) if hidden % w == 0), next(w for w in range(min(hidden, 16), 0, -1)
                                                                   if hidden % w == 0))


def batch_block(batch, gates: int, jb: int) -> int:
    """BB: the batch rows of one block (each weight vector loaded once for all of them)."""
    b = as_int(batch)
    if b is None:
        return 1
    return max(w for w in range(1, b + 1) if b % w == 0 and w * gates * jb <= MAX_ACC or w == 1)


def recurrence(op: str, attrs, ins: list[Buffer], outs: list[Buffer]) -> Stmt:
    """The whole recurrence of one lstm, gru or rnn application (see the module docstring)."""
    return _Kernel(op, attrs, ins, outs).stmt()


class _Kernel:
    def __init__(self, op, attrs, ins, outs):
        self.op, self.attrs = op, attrs
        self.gates, self.acts, _ = CELLS[op]
        self.xp, self.rp = ins[:2]
        self.given = dict(zip(attrs["given"], ins[2:]))
        self.y, self.yh = outs[:2]
        self.yc = outs[2] if op == "lstm" else None
        self.layout1 = attrs["layout"] == 1
        self.steps, self.batch = (self.xp.shape[1], self.xp.shape[0]) if self.layout1 else self.xp.shape[:2]
        self.dirs, self.hidden = as_int(self.rp.shape[0]), as_int(self.rp.shape[2])
        self.dtype = self.xp.dtype
        self.jb = hidden_block(self.hidden)
        self.bb = batch_block(self.batch, self.gates, self.jb)
        self.h_state = _buffer("h_state", (2, self.dirs, self.batch, self.hidden), self.dtype)
        self.clip = clipper(attrs["clip"], EXPR_MATH)

    # -- indexing ---------------------------------------------------------------------------
    def state_index(self, d, b, j):
        return (b, d, j) if self.layout1 else (d, b, j)

    def xp_at(self, t, b, d, gate, j):
        col = (d * self.gates + gate) * self.hidden + j
        return self.xp[(b, t, col) if self.layout1 else (t, b, col)]

    def length(self, b) -> PrimExpr:
        lens = self.given.get("seq_lens")
        return self.steps if lens is None else cast("int64", lens[b])

    def reversed_(self, d) -> PrimExpr | bool:
        return {"forward": False, "reverse": True}.get(self.attrs["direction"], d == 1)

    def time(self, s, d, b) -> PrimExpr:
        """The time index direction d reads at step s (clamped into range past a sequence's end)."""
        rev = self.reversed_(d)
        back = max_(self.length(b) - 1 - s, 0) if "seq_lens" in self.given else self.steps - 1 - s
        return s if rev is False else back if rev is True else select(rev, back, s)

    def functions(self, d):
        """The activation functions of direction d."""
        triples = self.attrs["activations"]
        if self.dirs == 1 or triples[:self.acts] == triples[self.acts:]:
            return [activation(a, EXPR_MATH) for a in triples[:self.acts]]
        return [_per_direction(d, activation(a0, EXPR_MATH), activation(a1, EXPR_MATH))
                for a0, a1 in zip(triples[:self.acts], triples[self.acts:])]

    # -- the statement ----------------------------------------------------------------------
    def stmt(self) -> Stmt:
        s = Var("s")
        body = seq(*self.step(s))
        return Allocate(self.h_state, seq(self.init(), For(s, const(0), _expr(self.steps), "serial", body),
                                          self.final()))

    def _over_states(self, make) -> Stmt:
        d, b, j = Var("d"), Var("b"), Var("j")
        return _loops([(d, self.dirs), (b, self.batch), (j, self.hidden)], make(d, b, j))

    def init(self) -> Stmt:
        zero = const(0.0, self.dtype)

        def make(d, b, j):
            st = self.state_index(d, b, j)
            h0, c0 = self.given.get("h0"), self.given.get("c0")
            stores = [_store(self.h_state, zero if h0 is None else h0[st], (0, d, b, j))]
            if self.yc is not None:
                stores.append(_store(self.yc, zero if c0 is None else c0[st], st))
            return seq(*stores)

        return self._over_states(make)

    def final(self) -> Stmt:
        """y_h from the last state; zero final states for an empty sequence (as ONNX Runtime)."""
        last = _expr(self.steps) % 2
        zero = const(0.0, self.dtype)

        def make(d, b, j):
            st = self.state_index(d, b, j)
            if "seq_lens" not in self.given:
                return _store(self.yh, self.h_state[last, d, b, j], st)
            empty = self.length(b) <= 0
            stores = [_store(self.yh, select(empty, zero, self.h_state[last, d, b, j]), st)]
            if self.yc is not None:
                stores.append(_store(self.yc, select(empty, zero, self.yc[st]), st))
            return seq(*stores)

        return self._over_states(make)

    def step(self, s) -> list[Stmt]:
        cur, nxt = s % 2, (s + 1) % 2
        h_prev = lambda d, b, j: self.h_state[cur, d, b, j]  # noqa: E731
        zero = const(0.0, self.dtype)

        def finish(d, b, j, h_new, c_new=None) -> list[tuple[Buffer, PrimExpr, tuple]]:
            """The stores of a unit's new states (held past the sequence's end) and of y."""
            t = self.time(s, d, b)
            valid = s < self.length(b) if "seq_lens" in self.given else None
            keep = (lambda new, old: new) if valid is None else (lambda new, old: select(valid, new, old))
            pos = t if valid is None else select(valid, t, s)
            y_at = (b, pos, d, j) if self.layout1 else (pos, d, b, j)
            stores = [(self.y, keep(h_new, zero), y_at), (self.h_state, keep(h_new, h_prev(d, b, j)), (nxt, d, b, j))]
            if c_new is not None:
                stores.append((self.yc, keep(c_new, self.yc[self.state_index(d, b, j)]), self.state_index(d, b, j)))
            return stores

        if self.op == "lstm":
            def init(d, b, g, j):
                return self.xp_at(self.time(s, d, b), b, d, g, j)

            def cell(d, b, j, a):
                f, g, h = self.functions(d)
                p = self.given.get("p")
                peep = None if p is None else tuple(p[d, k * self.hidden + j] for k in range(3))
                h_new, c_new = lstm_cell(a, self.yc[self.state_index(d, b, j)], peep, f, g, h, self.clip,
                                         self.attrs["input_forget"])
                return finish(d, b, j, h_new, c_new)

            return [self.phase(range(4), h_prev, init, cell)]
        if self.op == "rnn":
            def cell(d, b, j, a):
                (f,) = self.functions(d)
                return finish(d, b, j, f(self.clip(a[0])))

            return [self.phase([0], h_prev, lambda d, b, g, j: self.xp_at(self.time(s, d, b), b, d, g, j), cell)]
        return self.gru_step(s, h_prev, finish)

    def gru_step(self, s, h_prev, finish) -> list[Stmt]:
        x = lambda d, b, g, j: self.xp_at(self.time(s, d, b), b, d, g, j)  # noqa: E731
        if self.attrs["linear_before_reset"]:
            rbh = self.given["rbh"]

            def cell(d, b, j, a):
                f, g = self.functions(d)
                z, r = f(self.clip(a[0])), f(self.clip(a[1]))
                hh = g(self.clip(x(d, b, 2, j) + r * (a[2] + rbh[d, j])))
                return finish(d, b, j, gru_cell(z, hh, h_prev(d, b, j)))

            zero = const(0.0, self.dtype)
            return [self.phase(range(3), h_prev, lambda d, b, g, j: x(d, b, g, j) if g < 2 else zero, cell)]
        # r * h_prev is needed whole before the h gate: z and r * h_prev first, in scratch
        scratch = {name: _buffer(name, (self.dirs, self.batch, self.hidden), self.dtype) for name in ("z", "rh")}

        def gates(d, b, j, a):
            f, _ = self.functions(d)
            return [(scratch["z"], f(self.clip(a[0])), (d, b, j)),
                    (scratch["rh"], f(self.clip(a[1])) * h_prev(d, b, j), (d, b, j))]

        def cell(d, b, j, a):
            _, g = self.functions(d)
            return finish(d, b, j, gru_cell(scratch["z"][d, b, j], g(self.clip(a[0])), h_prev(d, b, j)))

        rh = lambda d, b, k: scratch["rh"][d, b, k]  # noqa: E731
        body = seq(self.phase(range(2), h_prev, x, gates),
                   self.phase([2], rh, lambda d, b, g, j: x(d, b, 2, j), cell))
        return [Allocate(scratch["z"], Allocate(scratch["rh"], body))]

    def phase(self, gates, source, init, cell) -> Stmt:
        """One parallel loop over (direction, batch block, hidden block): the pre-activations of
        `gates` (xp's, from `init(d, b, gate, j)`, plus source(d, b, k) @ R[d]^T for those gates),
        then `cell(d, b, j, pre-activations)`'s stores, (buffer, value, index) triples."""
        gates = list(gates)
        jb, bb, hidden = self.jb, self.bb, self.hidden
        # ks independent partial sums along k (k split ks ways, summed in the cell): more chains of
        # multiply-adds in flight where few batch rows leave registers free
        ks = max(q for q in (1, 2, 4) if hidden % q == 0 and q * bb * len(gates) * jb <= MAX_ACC)
        n_j = hidden // jb
        n_b = self.batch // bb if as_int(self.batch) is None else as_int(self.batch) // bb
        acc = _buffer("acc", (ks, bb, len(gates), jb), self.dtype, scope="local")
        new = _buffer("new", (3, jb), self.dtype, scope="local")
        w, bi, jj, k, q = Var("w"), Var("bi"), Var("jj"), Var("k"), Var("q")
        d = w // (n_b * n_j) if self.dirs > 1 else const(0)
        b = (w // n_j) % n_b * bb + bi
        j = w % n_j * jb + jj
        vector = "vectorized" if jb in (4, 8, 16) else "serial"
        zero = const(0.0, self.dtype)
        fill = [For(jj, const(0), const(jb), vector, _store(acc, init(d, b, g, j) if part == 0 else zero,
                                                             (part, bi, n, jj)))
                for part in range(ks) for n, g in enumerate(gates)]
        kk = k * ks + q
        h_k = source(d, b, kk)
        update = [For(jj, const(0), const(jb), vector,
                      _store(acc, acc[q, bi, n, jj] + h_k * self.rp[d, w % n_j, kk, g, jj], (q, bi, n, jj)))
                  for n, g in enumerate(gates)]
        pre = [functools.reduce(operator.add, (acc[part, bi, n, jj] for part in range(ks))) for n in range(len(gates))]
        # the cell: its values in `new` first (they read what the stores overwrite), then the stores
        stores = cell(d, b, j, pre)
        values = list({id(value): value for _, value, _ in stores}.values())  # y and h share h_new
        rows = {id(value): m for m, value in enumerate(values)}
        compute = seq(*(_store(new, value, (m, jj)) for m, value in enumerate(values)))
        write = seq(*(_store(buf, new[rows[id(value)], jj], idx) for buf, value, idx in stores))
        # the batch rows unrolled: constant indices keep the accumulators in registers
        body = seq(
            For(bi, const(0), const(bb), "unrolled", seq(*fill)),
            For(k, const(0), const(hidden // ks), "serial",
                For(q, const(0), const(ks), "unrolled", For(bi, const(0), const(bb), "unrolled", seq(*update)))),
            For(bi, const(0), const(bb), "unrolled", seq(For(jj, const(0), const(jb), vector, compute),
                                                         For(jj, const(0), const(jb), vector, write))),
        )
        macs = self.dirs * len(gates) * hidden * hidden * (as_int(self.batch) or PARALLEL_MIN_MACS)
        kind = "parallel" if macs >= PARALLEL_MIN_MACS else "serial"
        return For(w, const(0), _expr(self.dirs * n_b * n_j), kind, Allocate(acc, Allocate(new, body)))


def _per_direction(d, forward, backward):
    return lambda x: select(d == 0, forward(x), backward(x))


def _buffer(name: str, shape, dtype: str, scope: str = "global") -> Buffer:
    return Buffer(name, tuple(convert(d) for d in shape), dtype, scope)


def _store(buf: Buffer, value, index) -> BufferStore:
    return BufferStore(buf, cast(buf.dtype, convert(value)), tuple(convert(i) for i in index))


def _expr(v) -> PrimExpr:
    return v if isinstance(v, PrimExpr) else const(int(v))


def _loops(loops, body: Stmt) -> Stmt:
    for var, extent in reversed(loops):
        body = For(var, const(0), _expr(extent), "serial", body)
    return body
