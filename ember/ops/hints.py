"""What an operator's compute tells the schedules about itself, so that operators need nothing of
the schedules (ember.schedules imports ember.ops, never the other way):

- `PACK`: the tag of a stage computed once, at the root (an operand copied into a padded or
  transposed layout, a padded input);
- `by_rows(row_axes, inner_axes)`: compute attributes saying how an output splits into rows that
  a row schedule runs one by one (ember.schedules.cpu.rows);
- `CONTIGUOUS`: the compute attribute of a reduction over contiguous elements, which a schedule
  may run in vector lanes;
- `lanes_dividing`: the widest of some vector widths that divides an extent. The widths come
  from the target's `lanes` (ember.target): an operator whose packed layout is sized to whole
  vectors (OpDef.lanes) reads them from its attribute "lanes", which the kernel's target binds
  (ember.schedules.apply); the schedules are given the target.
"""

from __future__ import annotations

from collections.abc import Sequence

PACK = "pack"
CONTIGUOUS = "contiguous_reduction"


def by_rows(row_axes: Sequence[int], inner_axes: Sequence[int] = ()) -> dict:
    """The te compute attributes that tell a row schedule how an output splits into rows."""
    return {"rows": (tuple(row_axes), tuple(inner_axes))}


def lanes_dividing(n: int | None, widths: Sequence[int]) -> int | None:
    """The first of `widths` (vectors, in lanes; widest first) that divides n; a width under 2 is
    no vector (the interpreter's 1 lane, halved)."""
    return next((w for w in widths if w > 1 and n is not None and n % w == 0), None)
