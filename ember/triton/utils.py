"""`triton.cdiv` and `triton.next_power_of_2`: the integer helpers a launch computes its grid
and block sizes with (on the host; inside a kernel `tl.cdiv` is the builtin)."""

from __future__ import annotations


def cdiv(x: int, y: int) -> int:
    """x / y rounded up: the number of blocks of y that cover x."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 at least n (n for a power of 2; 0 for 0), as Triton computes it."""
    n = int(n) - 1
    for shift in (1, 2, 4, 8, 16, 32):
        n |= n >> shift
    return n + 1
