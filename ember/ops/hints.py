"""What an operator's compute tells the schedules about itself, so that operators need nothing of
the schedules (ember.schedules imports ember.ops, never the other way):

- `PACK`: the tag of a stage computed once, at the root (an operand copied into a padded or
  transposed layout, a padded input);
- `by_rows(row_axes, inner_axes)`: compute attributes saying how an output splits into rows that
  a row schedule runs one by one (ember.schedules.cpu.rows);
- `CONTIGUOUS`: the compute attribute of a reduction over contiguous elements, which a schedule
  may run in vector lanes;
- `VECTOR_LANES`, `lanes_dividing`: the vector width (fp32 lanes) that packed layouts are sized
  to, so that a block of them fills vector registers.
"""

from __future__ import annotations

from collections.abc import Sequence

PACK = "pack"
CONTIGUOUS = "contiguous_reduction"
VECTOR_LANES = 16  # fp32 lanes of one AVX-512 register; wider loops are split by the lowering


def by_rows(row_axes: Sequence[int], inner_axes: Sequence[int] = ()) -> dict:
    """The te compute attributes that tell a row schedule how an output splits into rows."""
    return {"rows": (tuple(row_axes), tuple(inner_axes))}


def lanes_dividing(n: int | None, widths=(2 * VECTOR_LANES, VECTOR_LANES, VECTOR_LANES // 2)) -> int | None:
    """The widest vector (in fp32 lanes) that divides n."""
    return next((w for w in widths if n is not None and n % w == 0), None)
