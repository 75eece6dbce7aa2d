"""How gemm_nbits' act "int8_rows" kernel shares a prefill's product between threads: the C of
ember.codegen.c_gemm_nbits_vnni computes these same ranges (this is the reference its tests read).

The rows come in blocks of ROWS_BLOCK, each multiplied by the panels (32 columns) a thread is
given, block after block. With at least as many blocks as threads, a thread takes a contiguous
range of blocks and every panel, and quantizes each block into its own scratch as the block's
products begin (no barrier; the scratch a block's, not the prompt's). With fewer blocks (a
short prompt on many cores: 128 tokens are two blocks) the threads of a block split its panels:
thread t works on block t * blocks / T, the block's threads taking contiguous ranges of its
panels; every thread then quantizes an even share of the rows into the shared scratch before a
barrier, so that each row is quantized once (a block quantized per task instead cost about a
third of a 64 x 768 x 96 task: 6.6 us of quantization against 20 us of products, one Zen 4 core).

The threads: at most the caller's, one per (block, panel) and one per PARALLEL_MIN_WORK
innermost iterations (M K columns / 16: a vector FMA's), as the float32 products' parallel loops
(ember.tir.work).
"""

from __future__ import annotations

from .work import PARALLEL_MIN_WORK

ROWS_BLOCK = 64  # rows quantized and multiplied by every panel together (gemm_nbits' GEMM_NBITS_ROWS)


def blocks(m: int) -> int:
    """The blocks of ROWS_BLOCK rows that cover m rows."""
    return -(-m // ROWS_BLOCK)


def rows_threads(m: int, k: int, cols: int, panels: int, threads: int) -> int:
    """The threads the kernel runs on for m rows, K = k, `cols` columns of codes (the weight's,
    padded to whole panels) of which `panels` output panels are split, the caller's `threads`."""
    return max(1, min(threads, blocks(m) * panels, m * k * cols // 16 // PARALLEL_MIN_WORK))


def rows_task(m: int, panels: int, threads: int, t: int) -> tuple[int, int, int, int]:
    """Thread t's share: (first block, end block, first panel, end panel)."""
    count = blocks(m)
    if count >= threads:
        return count * t // threads, count * (t + 1) // threads, 0, panels
    b = count * t // threads
    first, end = -(-b * threads // count), -(-(b + 1) * threads // count)  # the block's threads
    j, share = t - first, end - first
    return b, b + 1, panels * j // share, panels * (j + 1) // share


def rows_quantized(m: int, threads: int, t: int) -> tuple[int, int]:
    """The rows thread t quantizes (first, end): its own blocks' where it has whole blocks, else an
    even share of all (read by every thread after the barrier)."""
    count = blocks(m)
    if count >= threads:
        b0, b1, _, _ = rows_task(m, 1, threads, t)
        return b0 * ROWS_BLOCK, min(b1 * ROWS_BLOCK, m)
    return m * t // threads, m * (t + 1) // threads
