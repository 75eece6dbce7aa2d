"""The task scheduler: which task of a model gets the next batch of trials (Ansor's gradient
scheduler, without its similar-task term).

The model's estimated latency is the sum over tasks of weight x best latency. Each task is
first given one batch; then the next batch goes to the task where it is expected to lower the
estimate most: weight x (ALPHA x the improvement per trial over its last WINDOW trials +
(1 - ALPHA) x its best latency / its trials, the optimistic guess that it keeps improving at its
average rate). A share EPSILON of the batches goes to a random task, so that no task starves on
a bad estimate.
"""

from __future__ import annotations

import random

ALPHA = 0.2
WINDOW = 3  # batches
EPSILON = 0.05


class GradientScheduler:
    def __init__(self, weights: list[float], seed: int = 0):
        self.weights = list(weights)
        self.rng = random.Random(seed)
        self.history: list[list[tuple[int, float]]] = [[] for _ in weights]  # per task: (trials, best s)

    def record(self, task: int, trials: int, best_latency_s: float) -> None:
        self.history[task].append((trials, best_latency_s))

    def next_task(self, exclude=()) -> int:
        """The index of the task to tune next, among those not in `exclude` (tasks whose space
        is exhausted)."""
        tasks = [k for k in range(len(self.weights)) if k not in exclude]
        if not tasks:
            raise ValueError("every task is excluded")
        for k in tasks:
            if not self.history[k]:
                return k
        if self.rng.random() < EPSILON:
            return self.rng.choice(tasks)
        return max(tasks, key=self.gain)

    def gain(self, task: int) -> float:
        """How much a trial of `task` is expected to lower the model's latency (seconds per trial)."""
        h = self.history[task]
        trials, best = h[-1]
        if trials == 0 or best == float("inf"):
            return float("inf") if trials == 0 else 0.0
        old_trials, old_best = h[max(0, len(h) - 1 - WINDOW)] if len(h) > 1 else (0, best)
        backward = (old_best - best) / (trials - old_trials) if trials > old_trials and old_best < float("inf") else 0.0
        optimistic = best / trials
        return self.weights[task] * (ALPHA * backward + (1 - ALPHA) * optimistic)
