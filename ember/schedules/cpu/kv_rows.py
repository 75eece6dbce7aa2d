"""CPU schedule of kv_int8_rows (ember.ops.kv_rows): row by row (rows.schedule_rows), the row's
maximum in vector lanes, where the default schedule ran every element of it scalar (GPT-2 small's
24 rows of a decode step, one thread of a loaded AMD EPYC Zen 5: 35 -> 22.5 us). The codes stay
scalar: a row of E codes and the scale's 4 bytes is no whole number of vectors."""

from . import schedules
from .rows import schedule_rows

schedules("kv_int8_rows")(schedule_rows)
