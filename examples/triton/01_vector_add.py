"""Vector addition: the first tile kernel, written as Triton's tutorial writes it.

Each program adds one block of BLOCK_SIZE elements; `tl.arange` gives the block's offsets, the
mask keeps the last block inside the vectors (their size need not be a multiple of the block),
and a masked load or store touches nothing outside it. Only the import differs from Triton:

    import ember.triton as triton               # instead of: import triton
    import ember.triton.language as tl          # instead of: import triton.language as tl

Run it compiled (`python examples/triton/01_vector_add.py`) or in the NumPy interpreter
(`EMBER_INTERPRET=1 python ...`, where `print` and `breakpoint()` work inside the kernel).
"""

import numpy as np

import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)  # the grid is one-dimensional: one program per block
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements  # the last block may reach past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add(x: np.ndarray, y: np.ndarray, block_size: int = 1024) -> np.ndarray:
    output = np.empty_like(x)
    n_elements = output.size
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=block_size)
    return output


def main(size: int = 98432) -> None:
    rng = np.random.default_rng()
    x, y = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
    out = add(x, y)
    err = float(np.max(np.abs(out - (x + y))))
    print(f"vector add of {size} float32: max abs difference from NumPy {err:.3g}")
    assert err == 0.0


if __name__ == "__main__":
    main()
