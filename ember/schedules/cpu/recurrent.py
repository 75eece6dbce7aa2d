"""CPU schedule of lstm, gru and rnn (ember.ops.recurrent): none to apply. Their kernel is a
loop-IR statement built with its parallel and vector loops already chosen
(ember.ops.recurrent_kernel), an opaque block that schedule primitives do not enter."""

from . import schedules


@schedules("lstm", "gru", "rnn")
def schedule_recurrence(s, outputs, target) -> None:
    """The recurrence's loops stay as built."""
