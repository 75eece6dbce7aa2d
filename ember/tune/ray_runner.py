"""Measuring candidates on a Ray cluster, with the interface of LocalRunner.

Each alive node gets one Ray actor, pinned to it and reserving all of its CPUs (no other Ray
work lands there while it builds and times), that holds a LocalRunner with one worker process per
CPU. A batch is dealt out among the nodes; each node builds its share in parallel and then checks
and times it one candidate at a time, so a kernel is timed on the node that built it and never
next to another timing. A candidate that crashes or hangs costs a worker process on its node,
as on one machine; a node that fails as a whole fails its share of the batch, and the next batch
starts a new actor there.

Every node needs ember (and its C compiler) installed; libraries are cached on each node's disk.
Ray is optional: `pip install ember[ray]`.
"""

from __future__ import annotations

import contextlib

from ..errors import WorkerError
from .measure import LocalRunner, MeasureInput, MeasureResult


class RayRunner:
    """`address`: the Ray cluster to join ("auto", "ray://host:10001", ...; None: the Ray
    instance this process already started, or a new local one). The other options are
    LocalRunner's, applied on every node; `workers_per_node` defaults to the node's CPUs."""

    def __init__(self, address: str | None = None, timeout_s: float = 10.0, repeats: int = 5,
                 min_repeat_s: float = 0.01, check: bool = True, flush_cache: bool = True,
                 workers_per_node: int | None = None):
        self._ray = _import_ray()
        self._started_ray = not self._ray.is_initialized()
        if self._started_ray:
            self._ray.init(address=address, include_dashboard=False)
        self._options = dict(timeout_s=timeout_s, repeats=repeats, min_repeat_s=min_repeat_s, check=check,
                             flush_cache=flush_cache)
        self._workers_per_node = workers_per_node
        self._actors: dict[str, object] = {}  # node id -> its actor

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        """Build, check and time each input on the cluster's nodes (see LocalRunner.measure)."""
        ray = self._ray
        nodes = self._node_actors()
        shares = {node: list(range(k, len(inputs), len(nodes))) for k, node in enumerate(nodes)}
        pending = {node: nodes[node].measure.remote([inputs[i] for i in share], repeats, cutoff_s)
                   for node, share in shares.items() if share}
        results: list[MeasureResult | None] = [None] * len(inputs)
        for node, ref in pending.items():
            try:
                measured = ray.get(ref)
            except ray.exceptions.RayError as e:
                self._actors.pop(node, None)
                measured = [MeasureResult((), f"node {node} failed: {type(e).__name__}: {e}")] * len(shares[node])
            for i, result in zip(shares[node], measured):
                results[i] = result
        return results

    def _node_actors(self) -> dict[str, object]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {n["NodeID"]: int(n["Resources"].get("CPU", 0)) for n in self._ray.nodes() if n["Alive"]}
        alive = {node: cpus for node, cpus in alive.items() if cpus > 0}
        if not alive:
            raise WorkerError("the Ray cluster has no alive node with CPUs to measure on")
        for node in set(self._actors) - set(alive):
            del self._actors[node]
        for node, cpus in alive.items():
            if node not in self._actors:
                actor = self._ray.remote(NodeRunner).options(
                    num_cpus=cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                self._actors[node] = actor.remote(workers=self._workers_per_node or cpus, **self._options)
        return dict(self._actors)

    def close(self) -> None:
        for actor in self._actors.values():
            with contextlib.suppress(self._ray.exceptions.RayError):  # a dead node's actor
                self._ray.get(actor.close.remote(), timeout=30)
            self._ray.kill(actor)
        self._actors = {}
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NodeRunner:
    """The actor on one node: a LocalRunner there."""

    def __init__(self, **options):
        self.runner = LocalRunner(**options)

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        return self.runner.measure(inputs, repeats, cutoff_s)

    def close(self) -> None:
        self.runner.close()


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("RayRunner needs Ray, which is not installed: pip install ember[ray]") from e
    return ray
