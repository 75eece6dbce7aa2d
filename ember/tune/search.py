"""Evolutionary search over the candidates of a task's design space, guided by a cost model.

A candidate is a sketch (ember.tune.space) and its decisions, the values its sampling
instructions took, in order. Each round (`propose(n)`):
1. a population: the best measured candidates so far and fresh random samples of every sketch;
2. GENERATIONS times: the cost model scores the population, parents are drawn in proportion to
   their rank, and each child is its parent with one decision mutated (a tile factor moved
   between two levels, another unroll limit, another compute location), rebuilt by re-running
   its sketch with the changed decisions (ember.tir.schedule.Schedule.forced);
3. the n best-scored candidates not measured yet, of which a share EPSILON is replaced by
   random ones (exploration: the model only knows what has been measured).
`tell(candidates, latencies)` records measurements; the caller retrains the model on them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ..errors import ScheduleError
from ..tir.schedule import Schedule
from ..tir.schedule.sampling import divisors
from .space import Sketch, apply_sketch, design_space, sample
from .task import Task

POPULATION = 48
GENERATIONS = 2
EPSILON = 0.2  # the share of each batch drawn at random
ELITE = 16  # best measured candidates seeded into each population


@dataclass(eq=False)
class Candidate:
    sketch: Sketch
    sch: Schedule
    decisions: tuple = field(init=False)
    features: np.ndarray | None = None

    def __post_init__(self):
        self.decisions = tuple(self.sch.trace.decisions().values())

    @property
    def key(self) -> tuple:
        """What tells candidates apart: the sketch and every decision."""
        return (self.sketch.name, _hashable(self.decisions))


def _hashable(v):
    return tuple(_hashable(x) for x in v) if isinstance(v, list | tuple) else v


class EvolutionarySearch:
    def __init__(self, task: Task, cost_model, features, seed: int = 0, space=design_space):
        """`features(sch) -> np.ndarray` describes a candidate to `cost_model`; `space(task)` gives
        the sketches (a backend's tuner rules, ember.backends; the CPU's by default)."""
        self.task, self.cost_model, self.features = task, cost_model, features
        self.sketches = space(task)
        self.rng = random.Random(seed)
        self.measured: dict[tuple, float] = {}  # candidate key -> median latency (inf: failed)
        self.pool: dict[tuple, Candidate] = {}  # every candidate built so far, by key (features cached)
        self.best: list[tuple[float, Candidate]] = []  # the ELITE fastest, fastest first

    def propose(self, n: int) -> list[Candidate]:
        population = [c for _, c in self.best] + self._random(POPULATION - len(self.best))
        pool: dict[tuple, Candidate] = {c.key: c for c in population}
        for _ in range(GENERATIONS):
            scored = self._score(population)
            children = [self._known(self._mutate(self._pick(scored))) for _ in range(POPULATION)]
            population = [c for c in children if c is not None] + [c for _, c in scored[: POPULATION // 4]]
            pool.update((c.key, c) for c in population)
        fresh = [c for _, c in self._score(list(pool.values())) if c.key not in self.measured]
        explore = max(1, round(n * EPSILON)) if n > 1 else 0
        batch = _unique(fresh[: n - explore] + self._random(explore * 2))
        batch = [c for c in batch if c.key not in self.measured][:n]
        return batch

    def tell(self, candidates: list[Candidate], latencies_s: list[float]) -> None:
        for c, t in zip(candidates, latencies_s):
            self.measured[c.key] = t
            if np.isfinite(t):
                self.best.append((t, c))
        self.best = sorted(self.best, key=lambda x: x[0])[:ELITE]

    # -- the steps ------------------------------------------------------------------------------
    def _random(self, n: int) -> list[Candidate]:
        out = []
        for _ in range(n):
            sketch = self.rng.choice(self.sketches)
            sch = sample(self.task, sketch, self.rng.getrandbits(32))
            if sch is not None:
                out.append(Candidate(sketch, sch))
        return out

    def _known(self, c: Candidate | None) -> Candidate | None:
        """The candidate built before with the same decisions, if any (its features computed)."""
        if c is None:
            return None
        return self.pool.setdefault(c.key, c)

    def featurize(self, cands: list[Candidate]) -> None:
        """Compute the features of the candidates that have none yet."""
        for c in cands:
            if c.features is None:
                c.features = self.features(c.sch)

    def _score(self, cands: list[Candidate]) -> list[tuple[float, Candidate]]:
        """(predicted score, candidate), best first."""
        self.featurize(cands)
        scores = self.cost_model.predict([c.features for c in cands]) if cands else []
        return sorted(zip((float(s) for s in scores), cands), key=lambda x: -x[0])

    def _pick(self, scored: list[tuple[float, Candidate]]) -> Candidate:
        """A parent, the better ranked the likelier (weights 1/(rank+1))."""
        weights = [1.0 / (r + 1) for r in range(len(scored))]
        return self.rng.choices(scored, weights=weights)[0][1]

    def _mutate(self, parent: Candidate) -> Candidate | None:
        decisions = list(parent.decisions)
        if not decisions:
            return None
        k = self.rng.randrange(len(decisions))
        decisions[k] = mutate_decision(self.rng, decisions[k], parent.sch, k)
        key = (parent.sketch.name, _hashable(decisions))
        if key in self.measured:
            return None  # a neighbour measured already: rebuilding it costs more than it tells
        if key in self.pool:
            return self.pool[key]  # built before: its schedule and features are known
        try:
            sch = apply_sketch(self.task, parent.sketch, decisions, seed=self.rng.getrandbits(32))
        except ScheduleError:
            return None
        return Candidate(parent.sketch, sch)


def mutate_decision(rng: random.Random, decision, sch: Schedule, index: int):
    """A neighbouring decision: tile sizes with a factor moved from one level to another; an
    index (unroll limit, compute location) replaced by another of the same instruction."""
    if isinstance(decision, tuple):
        factors = list(decision)
        if len(factors) < 2:
            return decision
        src, dst = rng.sample(range(len(factors)), 2)
        if factors[src] == 1:
            return decision
        moved = rng.choice([d for d in divisors(factors[src]) if d > 1])
        factors[src] //= moved
        factors[dst] *= moved
        return tuple(factors)
    choices = _choices(sch, index)
    return rng.randrange(choices) if choices > 1 else decision


def _choices(sch: Schedule, index: int) -> int:
    """How many values the index-valued decision number `index` ranges over."""
    inst = [i for i in sch.trace if "decision" in dict(i.attrs)][index]
    match inst.kind:
        case "sample_categorical":
            return len(dict(inst.attrs)["candidates"])
        case "sample_loop":
            return len(dict(inst.inputs)["loops"])
    return 1


def _unique(cands: list[Candidate]) -> list[Candidate]:
    return list({c.key: c for c in cands}.values())
