"""The CUDA target: GPU kernels rendered as CUDA C (codegen.py, on the C-style base), barriers
where shared memory needs them (sync.py), pipelined shared-memory stages (pipeline.py: double
buffering, cp.async), the GPU's limits (limits.py) and run-time checks (checks.py), compiled by
NVRTC (nvrtc.py), launched through the driver API in the device's primary context (driver.py),
one kernel's build and call (kernel.py), a whole model's call program run on the GPU (model.py);
GPU schedules (schedules.py) and the kernels they are
measured on (workloads.py); the interpreter's GPU semantics (simt.py).

Nothing here touches the driver or NVRTC at import: `import ember` works without them, and a
missing piece is a DeviceError at build (NVRTC) or call (driver, GPU) that says which.
"""

from .kernel import CUDAKernel, build_cuda

__all__ = ["CUDAKernel", "build_cuda"]
