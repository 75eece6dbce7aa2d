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
reads fall into 8 distinct groups of banks (conflict-free without padding): in a row of 128 bytes
or more, chunk c of row r goes to chunk c ^ (r % 8) (its low three bits XORed: the chunk keeps
its group of 8, 128 bytes); rows shorter than 128 bytes go by 128-byte lines instead of rows
(chunk c of line l to c ^ (l % 8)). Both are one formula on the byte's offset o in the tile: bits
4-6 XORed with bits s..s+2, s = log2 of the row's bytes, at least 7 (`row_shift`).

Keyed by the offset in the tile, never by the address in shared memory: the two agree only where
the tile starts on a multiple of 8 rows (or lines: 1 KiB up to rows of 128 bytes, 2 KiB for rows
of 256), which no `__align__` beyond 1 KiB gives on an H200 (sm_90), whose block's shared data
starts 1 KiB into its window; keyed by the address, every GEMM whose rows of B were 256 bytes or
more read every product wrong, while rows of 64 and 128 bytes (bits of the address below 1 KiB)
were right. So a call that reads a tile is told where its pointers lie in their tiles
(ember.cuda.swizzle passes the offsets), and a lane's address is the tile's start plus its row's
swizzled offset (`lane_address`, the C code's `ember_lane_address`): right wherever the tile
starts (16 bytes apart at least, as ldmatrix's rows are), and conflict-free wherever it starts
(a phase's 8 rows, or a quarter-warp's 8 chunks of 16-byte copies, lie at 8 distinct offsets
modulo 128 bytes, which any start moves alike).

The interpreter places every tile an emulated call reads at byte `TILE_START` of the block's
shared window, 1 KiB + 128 bytes, a multiple of neither 1 nor 2 KiB, so that a lane's address
that depended on where its tile starts reads the wrong chunks on the CPU too.
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
    """Whether tiles of rows of `row_bytes` can be swizzled: a power of two, 16 bytes (a chunk) or more."""
    return row_bytes >= 16 and not row_bytes & (row_bytes - 1)


def row_shift(row_bytes: int) -> int:
    """The lowest bit of the offset in a tile that `swizzle` reads for rows of `row_bytes`: its
    row's (its 128-byte line's for shorter rows); a ScheduleError where they cannot be swizzled."""
    if not swizzles(row_bytes):
        raise ScheduleError(f"a swizzled shared tile has rows of a power of two bytes, 16 or more, not {row_bytes}")
    return max(7, row_bytes.bit_length() - 1)


def swizzle(offset, row_bytes: int):
    """Where the tile's byte `offset` (int or integer array, from the tile's start) lies, swizzled
    (module doc)."""
    return offset ^ (((offset >> row_shift(row_bytes)) & 7) << 4)


def lane_address(pointer, at, distance, row_bytes: int):
    """The shared address a lane gives ldmatrix, as the C code computes it: `pointer` the call's
    (the address of byte `at` of its tile), `distance` the bytes from there to the lane's row in
    the tile unswizzled; the tile's start, pointer - at, plus the row's offset swizzled."""
    return pointer - at + swizzle(at + distance, row_bytes)


TILE_START = 1024 + 128
"""The byte of the block's shared window where the interpreter places each tile an emulated call
reads (module doc)."""


ALIGNMENT = 128
"""The bytes a swizzled tile's start is aligned to: a 128-byte line, so that each group of 8
chunks the swizzle permutes is one line of banks. Its numbers need 16 (ldmatrix's rows), and its
banks no more (module doc): the line is the layout the bank tests measure, for at most 112 bytes."""
