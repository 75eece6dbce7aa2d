"""Schedules of operator kernels, apart from the operators they schedule (ember.ops): how an
operator application or a fused group becomes a scheduled te kernel (`apply`), and the schedules
of each target family (`cpu`: the C target's)."""
