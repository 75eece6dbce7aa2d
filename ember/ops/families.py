"""Imports every module of ember.ops, so that the registry is complete whichever module asks
first: the operator family modules register their operators when imported, and the others
(the registry, helpers, the reference evaluator) hold no operators and import cheaply. Schedules
live apart, in ember.schedules, so nothing here needs leaving out."""

import importlib
import pkgutil

from . import __path__ as _ops_path

for _info in pkgutil.iter_modules(_ops_path):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_info.name}")
