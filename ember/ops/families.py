"""Imports every module of ember.ops, so that the registry is complete whichever module asks
first (the package imports this module, and any import of one of its modules runs the package
first): the operator family modules register their operators when imported, and the others
(the registry, helpers, the reference evaluator) hold no operators and import cheaply. Schedules
live apart, in ember.schedules, so nothing here needs leaving out."""

import importlib
import pkgutil
from pathlib import Path

for _info in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_info.name}")
