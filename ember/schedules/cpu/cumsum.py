"""CPU schedule of cumsum and cumprod (ember.ops.cumsum): rows along the other axes (rows.schedule_rows)."""

from . import schedules
from .rows import schedule_rows

schedules("cumsum", "cumprod")(schedule_rows)
