"""What a tuning database holds: the best result of each workload, and the tuning curves.

    print(tuning_report(db))           # one line per workload and target
    plot_tuning_curves(db, "curve.png")  # best GFLOP/s after each trial, one line per workload
"""

from __future__ import annotations

import math
from pathlib import Path


def tuning_curve(records, flops: int) -> list[float]:
    """Best GFLOP/s after each record, in the order they were measured (0 until one is valid)."""
    best, curve = math.inf, []
    for r in records:
        if r.ok:
            best = min(best, r.median_s)
        curve.append(flops / best / 1e9 if best < math.inf else 0.0)
    return curve


def tuning_report(database) -> str:
    """A table: each workload's name, target, records (failed), best latency and GFLOP/s."""
    lines = [f"{'workload':28s} {'key':10s} {'records':>8s} {'failed':>7s} {'best ms':>10s} {'GFLOP/s':>8s}  target"]
    for w in database.workloads():
        records = database.records(w.key, w.target)
        failed = sum(not r.ok for r in records)
        best = database.best(w.key, w.target)
        ms = f"{best.median_s * 1e3:10.4f}" if best else f"{'-':>10s}"
        gflops = f"{w.flops / best.median_s / 1e9:8.1f}" if best else f"{'-':>8s}"
        lines.append(f"{w.name[:28]:28s} {w.key[:10]:10s} {len(records):8d} {failed:7d} {ms} {gflops}  {w.target}")
    return "\n".join(lines)


def plot_tuning_curves(database, path: str | Path) -> Path:
    """A PNG of the best GFLOP/s against trials, one line per workload (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting tuning curves needs matplotlib: pip install ember[tune]") from e
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for w in database.workloads():
        curve = tuning_curve(database.records(w.key, w.target), w.flops)
        if curve:
            ax.plot(range(1, len(curve) + 1), curve, label=f"{w.name} ({w.key[:6]})")
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title("ember tuning curves")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
