"""What the simulator measured in a kernel's last call: cycles, the busy cycles of each queue,
instructions, DMA bytes per memory, dependence tokens, the GEMM core's utilization (MACs done
over what the core could do in the cycles taken), and the queues' timeline as a Chrome trace
(chrome://tracing or https://ui.perfetto.dev: one row per queue, one slice per instruction, in
microseconds at the device's clock)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .simulator import OPS, STATS
from .spec import QUEUES, Accelerator


@dataclass(frozen=True)
class Report:
    accel: Accelerator
    stats: dict[str, int]  # simulator.STATS -> value
    trace: np.ndarray  # (instructions traced, 6): queue, opcode, start, end, bytes or MACs, tokens popped

    @property
    def cycles(self) -> int:
        return self.stats["cycles"]

    @property
    def utilization(self) -> float:
        """MACs done / (the core's MACs per cycle * cycles): 1.0 when the core never waits."""
        return self.stats["macs"] / max(1, self.accel.core.macs * self.cycles)

    @property
    def dma_bytes(self) -> dict[str, int]:
        """Bytes the DMA loaded into each memory (into the accumulator: biases), and "stored":
        the bytes it stored from the accumulator."""
        return {**{m.scope: self.stats[f"bytes_{m.role}"] for m in self.accel.memories},
                "stored": self.stats["bytes_stored"]}

    @property
    def seconds(self) -> float:
        return self.cycles / (self.accel.costs.clock_mhz * 1e6)

    def chrome_trace(self, path: str | Path | None = None) -> dict:
        """The timeline as a Chrome trace (a dict; also written to `path` when given)."""
        mhz = self.accel.costs.clock_mhz
        events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": q, "args": {"name": f"{name} queue"}}
                  for q, name in enumerate(QUEUES)]
        for q, op, start, end, work, popped in self.trace.tolist():
            waits = [QUEUES[p] for p in range(3) if popped >> p & 1]
            events.append({"name": OPS[op], "ph": "X", "pid": 0, "tid": q, "ts": start / mhz,
                           "dur": (end - start) / mhz, "args": {"cycles": end - start, "work": work,
                                                                "tokens_from": waits}})
        doc = {"traceEvents": events, "displayTimeUnit": "ns",
               "otherData": {"accelerator": self.accel.name, "cycles": self.cycles}}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc

    def __str__(self):
        s = self.stats
        rows = [f"{self.accel.name}: {self.cycles} cycles ({self.seconds * 1e6:.1f} us at {self.accel.costs.clock_mhz} "
                f"MHz), GEMM core {self.utilization:.1%} busy",
                "  queues busy: " + ", ".join(f"{q} {s['busy_' + q]}" for q in QUEUES),
                "  instructions: " + ", ".join(f"{op} {s['n_' + op.lower()]}" for op in OPS),
                "  DMA bytes: " + ", ".join(f"{k} {v}" for k, v in self.dma_bytes.items()),
                "  tokens: " + ", ".join(f"{k[7:].replace('_', '->')} {s[k]}" for k in STATS if k.startswith("tokens"))]
        return "\n".join(rows)
