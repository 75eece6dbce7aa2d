"""torch's current CUDA stream, as a raw handle, read the way Triton's launcher reads it.

`torch._C._cuda_getCurrentRawStream(ordinal)` returns the handle without making a
torch.cuda.Stream object (torch.cuda.current_stream makes one per call: a few microseconds a
launch); torch builds without it fall back to current_stream. Work then goes on the stream the
caller's torch code is using, as torch's own kernels would.
"""

from __future__ import annotations

import sys


def torch_stream(ordinal: int) -> int:
    """torch's current stream on GPU `ordinal` (torch imported: a caller passed its tensors)."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return int(raw(ordinal)) if raw is not None else int(torch.cuda.current_stream(ordinal).cuda_stream)
