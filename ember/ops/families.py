"""Imports every operator family module of ember.ops (each registers its operators when
imported), so that the registry is complete whichever module asks first."""

import importlib
import pkgutil

from . import __path__ as _ops_path

NOT_FAMILIES = {"registry", "families", "schedules", "kernel", "common", "testing", "evaluate", "build", "tiling",
                "rows"}

for _info in pkgutil.iter_modules(_ops_path):
    if _info.name not in NOT_FAMILIES and not _info.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_info.name}")
