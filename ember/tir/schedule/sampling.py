"""Sampling primitives: the free parameters of a schedule (tile sizes, an unroll limit, where a
block is computed) chosen at random, the choice recorded in the trace as the instruction's
`decision`.

    i0, i1, i2 = sch.sample_perfect_tile(i, n=3, max_innermost_factor=16)  # e.g. 4, 16, 16
    sch.split(i, [i0, i1, i2])

Replaying a trace replays its decisions, so a record rebuilds exactly the schedule that was
measured; replaying it with a decision changed (ember.tune's mutators) rebuilds a neighbour,
since every instruction that used the sampled value now sees the new one. `Schedule(func,
seed=...)` makes the choices reproducible.
"""

from __future__ import annotations

from math import prod

from ...errors import ScheduleError
from ..expr import as_int
from .registry import primitive
from .state import ExprRV, LoopRV, Schedule


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def random_perfect_tile(rng, extent: int, n: int, max_innermost_factor: int) -> tuple[int, ...]:
    """n factors whose product is `extent`, the innermost at most max_innermost_factor: each
    level takes a random divisor of what remains, the outermost takes the rest."""
    inner = rng.choice([d for d in divisors(extent) if d <= max(1, max_innermost_factor)])
    rest, factors = extent // inner, [inner]
    for _ in range(n - 2):
        f = rng.choice(divisors(rest))
        factors.append(f)
        rest //= f
    factors.append(rest)
    return tuple(reversed(factors))


def check_perfect_tile(decision, extent: int, n: int, max_innermost_factor: int) -> tuple[int, ...]:
    decision = tuple(int(x) for x in decision)
    if len(decision) != n or prod(decision) != extent or min(decision) < 1:
        raise ScheduleError(f"sample_perfect_tile: decision {decision} is not {n} factors of {extent}")
    if decision[-1] > max(1, max_innermost_factor):
        raise ScheduleError(f"sample_perfect_tile: innermost factor {decision[-1]} exceeds {max_innermost_factor}")
    return decision


def _valid_forced(sch: Schedule, check):
    """The schedule's next forced decision if it is legal here (else None: sample anew)."""
    decision = sch.forced_decision()
    if decision is None:
        return None
    try:
        check(decision)
    except (ScheduleError, TypeError, ValueError):
        return None
    return decision


def _check_index(decision, n: int) -> int:
    if not isinstance(decision, int) or not 0 <= decision < n:
        raise ScheduleError(f"decision {decision} is not an index of {n} choices")
    return decision


@primitive
def sample_perfect_tile(sch: Schedule, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                        decision: tuple | None = None) -> list[ExprRV]:
    """n tile sizes that multiply to the loop's (constant) extent, innermost last."""
    extent = as_int(sch.get_for(loop).extent)
    if extent is None:
        raise ScheduleError("sample_perfect_tile needs a loop of constant extent")
    if n < 1:
        raise ScheduleError(f"sample_perfect_tile: n must be at least 1, got {n}")
    if decision is None:
        decision = _valid_forced(sch, lambda d: check_perfect_tile(d, extent, n, max_innermost_factor))
    if decision is None:
        decision = random_perfect_tile(sch.rng, extent, n, max_innermost_factor) if n > 1 else (extent,)
    decision = check_perfect_tile(decision, extent, n, max_innermost_factor)
    sch.record_decision(decision)
    return [sch.new_expr_rv(v) for v in decision]


@primitive
def sample_categorical(sch: Schedule, candidates: list, probs: list, decision: int | None = None) -> ExprRV:
    """One of `candidates` (integers), drawn with probabilities `probs`; the decision is its index."""
    candidates, probs = list(candidates), list(probs)
    if not candidates or len(candidates) != len(probs):
        raise ScheduleError("sample_categorical: candidates and probs must be non-empty and of one length")
    if decision is None:
        decision = _valid_forced(sch, lambda d: _check_index(d, len(candidates)))
    if decision is None:
        decision = sch.rng.choices(range(len(candidates)), weights=probs)[0]
    if not 0 <= int(decision) < len(candidates):
        raise ScheduleError(f"sample_categorical: decision {decision} is not an index of {candidates}")
    sch.record_decision(int(decision))
    return sch.new_expr_rv(int(candidates[int(decision)]))


@primitive
def sample_loop(sch: Schedule, loops: list[LoopRV], decision: int | None = None) -> LoopRV:
    """One of `loops` (a compute location, say), uniformly; the decision is its index. The
    result is a new handle, so that replaying with another decision moves what uses it."""
    loops = list(loops)
    if not loops:
        raise ScheduleError("sample_loop needs at least one loop")
    if decision is None:
        decision = _valid_forced(sch, lambda d: _check_index(d, len(loops)))
    if decision is None:
        decision = sch.rng.randrange(len(loops))
    if not 0 <= int(decision) < len(loops):
        raise ScheduleError(f"sample_loop: decision {decision} is not an index of {len(loops)} loops")
    sch.record_decision(int(decision))
    return sch.new_loop_rv(sch.loop_var(loops[int(decision)]))
