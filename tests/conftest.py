"""Shared test configuration: hypothesis runs derandomized under CI (a failure found there
reproduces exactly), randomized elsewhere (to keep finding new ones)."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
