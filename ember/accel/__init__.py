"""A simulated VTA-style accelerator reached through tensorize (see docs/design.md, "Accelerators").

    from ember.accel import vdla
    CL = s.cache_write(C, vdla.acc_buffer)
    AL = s.cache_read(A, vdla.inp_buffer, [CL])
    ...
    s[CL].tensorize(yc, vdla.gemm8x8)
    f = ember.build(s, [A, B, C], target=vdla)     # host C + the device's simulator
    f(a, b, c); print(f.report())                  # cycles, DMA bytes, GEMM-core utilization

spec.py describes a device (its GEMM core, memories, costs, instruction set); configs.py holds
`vdla` (8x8 fp32) and `vta` (16x16 int8, int32 accumulators); lower.py turns the tensorized loop
IR into device instructions (with regions.py, memories.py, hoist.py, double_buffer.py);
simulator.py is the simulator in C; codegen.py renders the host C; kernel.py builds and runs it;
report.py reads the simulator's counters and timeline; schedules.py schedules a GEMM (and its
ALU epilogue) by its tiles, conv.py an int8 convolution as an im2col GEMM, tune.py searches
tiles and buffering by the simulator's cycles.
"""

from .configs import vdla, vta
from .spec import Accelerator, Costs, GemmCore, Memory

__all__ = ["Accelerator", "Costs", "GemmCore", "Memory", "vdla", "vta"]
