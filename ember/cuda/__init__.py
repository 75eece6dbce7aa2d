"""The CUDA target: GPU kernels rendered as CUDA C (codegen.py, on the C-style base), barriers
where shared memory needs them (sync.py), compiled by NVRTC (nvrtc.py), launched through the
driver API in the device's primary context (driver.py), one kernel's build and call (kernel.py).

Nothing here touches the driver or NVRTC at import: `import ember` works without them, and a
missing piece is a DeviceError at build (NVRTC) or call (driver, GPU) that says which.
"""

from .kernel import CUDAKernel, build_cuda

__all__ = ["CUDAKernel", "build_cuda"]
