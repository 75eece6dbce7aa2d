"""PTX's lane layouts of `ldmatrix` and `mma.sync.m16n8k16` (16-bit inputs, fp32 accumulators), as
NumPy: the interpreter's model of the Tensor Core calls of ember.intrinsics.mma, which runs them
lane by lane as the GPU does, so that a fragment held in the wrong lane or register is a wrong
number on the CPU, not only on the GPU.

The tables are PTX's (ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): in a
warp, lane l has groupID g = l / 4 and threadID_in_group t = l % 4, and holds

- of A (16x16, row-major): a0..a7 at rows g, g, g+8, g+8, g, g, g+8, g+8 and columns 2t, 2t+1
  (a0..a3) or 8 + 2t, 8 + 2t + 1 (a4..a7);
- of B (16x8, k by n): b0..b3 at rows 2t, 2t+1, 2t+8, 2t+9 and column g;
- of C and D (16x8): c0..c3 at rows g, g, g+8, g+8 and columns 2t, 2t+1.

`ldmatrix.sync.aligned.m8n8.x4.b16` loads four 8x8 matrices of 16-bit elements: lanes 8q..8q+7
give the addresses of matrix q's 8 rows (16 bytes each), and lane l receives in its register q
the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix q (with `.trans`, those of
its transpose: (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4)).

`swizzle`: the 16-byte chunks of a shared tile permuted so that the 8 rows one ldmatrix phase
reads fall into 8 distinct groups of banks (conflict-free without padding): the byte address's
bits 4-6 (the chunk within 128 bytes) XORed with bits 7-9 (the 128-byte line among 8). Applied
to the address in shared memory, whose bits 7-9 are the offset's where the tile starts on a
multiple of 1 KiB (`alignment`). Rows of at most 128 bytes only (`swizzles`): rows of 256 bytes
and more would take the bits above a row (8-10 and up), the address's where the tile starts on a
multiple of 2 KiB and more, which an address in the block's shared window is not: on an H200
(sm_90) a block's shared data starts 1 KiB into the window, whatever `__align__` its arrays
ask, and a GEMM of 256-byte rows of B read every product wrong while 64- and 128-byte rows were
right.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScheduleError

LANES = 32
LANE = np.arange(LANES)
GROUP, IN_GROUP = LANE // 4, LANE % 4


def a_layout() -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns), each (32, 8): where lane l's a_i lies in A's 16x16 tile."""
    i = np.arange(8)
    rows = GROUP[:, None] + 8 * ((i // 2) % 2)
    cols = 2 * IN_GROUP[:, None] + i % 2 + 8 * (i // 4)
    return rows, cols


def b_layout() -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns), each (32, 4): where lane l's b_i lies in B's 16x8 tile (k, n)."""
    i = np.arange(4)
    return 2 * IN_GROUP[:, None] + i % 2 + 8 * (i // 2), np.broadcast_to(GROUP[:, None], (LANES, 4))


def c_layout() -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns), each (32, 4): where lane l's c_i (and d_i) lies in the 16x8 tile."""
    i = np.arange(4)
    return GROUP[:, None] + 8 * (i // 2), 2 * IN_GROUP[:, None] + i % 2


def ldmatrix_x4(smem: np.ndarray, rows: np.ndarray, trans: bool = False) -> np.ndarray:
    """(32, 4, 2): each lane's four registers of two 16-bit elements, loaded from `smem` (a flat
    array) with rows[l] the element offset of the row lane l addresses (matrix l / 8, row l % 8)."""
    m = smem[rows[:, None] + np.arange(8)].reshape(4, 8, 8)  # matrix q, its row r, column c
    r, c = GROUP, 2 * IN_GROUP
    if trans:
        return np.stack([m[:, c, r], m[:, c + 1, r]], axis=-1).transpose(1, 0, 2)
    return np.stack([m[:, r, c], m[:, r, c + 1]], axis=-1).transpose(1, 0, 2)


def mma_m16n8k16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """d = a @ b + c, each operand as the lanes hold it: a (32, 8), b (32, 4), c (32, 4) fp32;
    the products of 16-bit inputs summed in fp32."""
    A, B, C = np.empty((16, 16), np.float32), np.empty((16, 8), np.float32), np.empty((16, 8), np.float32)
    A[a_layout()] = a
    B[b_layout()] = b
    C[c_layout()] = c
    return (A @ B + C)[c_layout()]


def swizzles(row_bytes: int) -> bool:
    """Whether tiles of rows of `row_bytes` can be swizzled: a power of two from 16 to 128 (module doc)."""
    return 16 <= row_bytes <= 128 and not row_bytes & (row_bytes - 1)


def row_shift(row_bytes: int) -> int:
    """The bit of the 128-byte line `swizzle` reads for rows of `row_bytes` (`swizzles`), a
    ScheduleError otherwise."""
    if not swizzles(row_bytes):
        raise ScheduleError(f"a swizzled shared tile has rows of a power of two from 16 to 128 bytes, not "
                            f"{row_bytes}")
    return 7


def swizzle(address, row_bytes: int):
    """The byte address (int or integer array) where the tile's byte `address` lies (module doc)."""
    return address ^ (((address >> row_shift(row_bytes)) & 7) << 4)


def alignment(row_bytes: int) -> int:
    """The bytes a swizzled tile's start is aligned to: 8 of its lines."""
    return 8 << row_shift(row_bytes)
