"""CPU schedules of the reductions (ember.ops.reduce): every output element a row of its own
(rows.schedule_rows)."""

from . import schedules
from .rows import schedule_rows

schedules("sum", "mean", "max", "min", "prod", "var", "std", "l2_norm", "argmax", "argmin")(schedule_rows)
