"""The arguments of a launch, checked and described once for the interpreter and the compiler.

A tensor argument (a numpy.ndarray or a CPU torch.Tensor, any strides) becomes a TensorArg: a
NumPy view of the same memory, its element type, and the span of memory the kernel may reach
from its first element (what the debug mode checks loads and stores against). As in Triton a
kernel sees a pointer to the first element; strides are the kernel's own integer arguments.
Python ints become int32 (int64 when they do not fit, uint64 past that), floats float32, bools
int1. A tensor in a GPU's memory (a torch CUDA tensor, anything with `__cuda_array_interface__`)
becomes a DeviceTensorArg for the compiler (its address, type, span and GPU); the interpreter
takes none. Anything else (a dtype the language lacks, a string, a torch tensor whose storage is
smaller than its shape: freed by `untyped_storage().resize_(0)`) is an ArgumentTypeError naming
the parameter, raised before any kernel runs.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentTypeError
from .language import dtypes as tld


@dataclass(frozen=True)
class TensorArg:
    array: np.ndarray  # shares the argument's memory
    dtype: tld.dtype

    @property
    def data_ptr(self) -> int:
        return self.array.__array_interface__["data"][0]

    @property
    def span(self) -> tuple[int, int]:
        """The elements reachable from the first one, [lo, hi) in elements (lo <= 0 only for
        negative strides)."""
        if self.array.size == 0:
            return 0, 0
        item = self.array.itemsize
        lo = sum(min(0, (n - 1) * s) for n, s in zip(self.array.shape, self.array.strides)) // item
        hi = sum(max(0, (n - 1) * s) for n, s in zip(self.array.shape, self.array.strides)) // item
        return lo, hi + 1

    def flat(self) -> np.ndarray:
        """The span as a one-dimensional view of the same memory; index `-span[0]` is the first
        element."""
        lowest = self.array
        for axis, stride in enumerate(self.array.strides):
            if stride < 0:
                lowest = np.flip(lowest, axis)
        lo, hi = self.span
        return np.lib.stride_tricks.as_strided(lowest, shape=(hi - lo,), strides=(self.array.itemsize,),
                                               writeable=self.array.flags.writeable)


@dataclass(frozen=True)
class DeviceTensorArg:
    """A tensor in a GPU's memory (a torch CUDA tensor, or anything with
    `__cuda_array_interface__`: CuPy, Numba): its address, element type and reachable span (in
    elements, as TensorArg's), the GPU's ordinal, and whether it is torch's (whose current stream
    a launch runs on)."""

    data_ptr: int
    dtype: tld.dtype
    span: tuple[int, int]
    device: int
    torch: bool


def on_device(value) -> bool:
    """Whether value is a tensor in a GPU's memory."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return value.device.type == "cuda"
    return hasattr(value, "__cuda_array_interface__")


_NAMES: dict = {}  # a torch dtype's or an array interface's typestr's name in the language (this runs at every launch)


def _name_of(dtype) -> str:
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = (str(dtype).removeprefix("torch.") if not isinstance(dtype, str)
                                else str(np.dtype(dtype)))
    return name


def device_tensor_arg(name: str, value) -> DeviceTensorArg:
    """The DeviceTensorArg of a GPU tensor given for parameter `name`."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        dtype_name = _name_of(value.dtype)
        ptr, device, is_torch = value.data_ptr(), value.device.index or 0, True
        if value.is_contiguous():  # (the common case, without walking the shape)
            shape, strides = (value.numel(),), (1,)
        else:
            shape, strides = tuple(value.shape), tuple(value.stride())
    else:
        cai = value.__cuda_array_interface__
        dtype_name = _name_of(cai["typestr"])
        shape = tuple(cai["shape"])
        if cai.get("strides"):
            strides = tuple(s // np.dtype(cai["typestr"]).itemsize for s in cai["strides"])
        else:  # C order: its elements one after another (a product, not numpy.prod's: this runs at every launch)
            n = 1
            for d in shape:
                n *= d
            shape, strides = (n,), (1,)
        ptr, is_torch = int(cai["data"][0]), False
        device = int(getattr(getattr(value, "device", None), "id", 0) or 0)
    if dtype_name not in tld.DTYPES:
        raise ArgumentTypeError(f"argument '{name}': dtype {dtype_name} is not a type of the tile language "
                                f"({', '.join(tld.DTYPES)})")
    if 0 in shape:
        span = (0, 0)
    else:
        span = (sum(min(0, (n - 1) * s) for n, s in zip(shape, strides)),
                sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1)
    return DeviceTensorArg(ptr, tld.DTYPES[dtype_name], span, device, is_torch)


def tensor_arg(name: str, value) -> TensorArg:
    """The TensorArg of an array or CPU torch tensor given for parameter `name`."""
    if not isinstance(value, np.ndarray):
        value = _torch_array(name, value)
    try:
        dtype = tld.from_numpy(value.dtype)
    except (KeyError, TypeError):
        raise ArgumentTypeError(f"argument '{name}': dtype {value.dtype} is not a type of the tile language "
                                f"({', '.join(tld.DTYPES)})") from None
    if any(s % value.itemsize for s in value.strides):
        raise ArgumentTypeError(f"argument '{name}': strides {value.strides} are not whole elements")
    return TensorArg(value, dtype)


def _torch_array(name: str, value) -> np.ndarray:
    torch = _torch()
    if torch is None or not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"argument '{name}': a numpy array, a CPU torch tensor or a scalar, "
                                f"not {type(value).__name__}")
    if value.device.type != "cpu":
        raise ArgumentTypeError(f"argument '{name}' is on {value.device}: this launch runs on the CPU; pass a "
                                f"CPU tensor (.cpu()), or launch with target='cuda'")
    value = value.detach()
    needed = (value.storage_offset() + _reach(value)) * value.element_size() if value.numel() else 0
    if value.untyped_storage().nbytes() < needed:
        raise ArgumentTypeError(f"argument '{name}': the tensor's storage holds {value.untyped_storage().nbytes()} "
                                f"bytes, fewer than its shape {tuple(value.shape)} reaches (was it freed or resized?)")
    if value.dtype == torch.bfloat16:
        import ml_dtypes

        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return value.resolve_conj().resolve_neg().numpy()
    except TypeError as e:
        raise ArgumentTypeError(f"argument '{name}': {e}") from None


def _reach(t) -> int:
    """The elements of storage a strided tensor reaches past its offset (negative strides do not exist in torch)."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _torch():
    import sys

    return sys.modules.get("torch")  # a torch tensor exists only where torch is imported


def scalar_dtype(value) -> tld.dtype:
    """The language type of a Python scalar, as Triton types it."""
    if isinstance(value, bool | np.bool_):
        return tld.int1
    if isinstance(value, numbers.Integral):
        value = int(value)
        if -2**31 <= value < 2**31:
            return tld.int32
        if -2**63 <= value < 2**63:
            return tld.int64
        if value < 2**64:
            return tld.uint64
        raise ArgumentTypeError(f"integer {value} does not fit 64 bits")
    if isinstance(value, numbers.Real):
        return tld.float32
    raise ArgumentTypeError(f"not a scalar: {type(value).__name__}")
