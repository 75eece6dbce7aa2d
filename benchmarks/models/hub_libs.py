"""torchvision's and timm's model definitions, imported from a folder of their own (never the
environment's site-packages).

The torchvision on PyPI is built against another torch than the one this project pins: installed
into the environment, pip would replace torch, and its C operators (nms, roi_align, ...) do not
load into this torch, which then breaks transformers' imports. The model definitions are plain
Python over torch.nn, so `make hub-libs` installs torchvision and timm without their
dependencies into HUB_LIBS (`.hub-libs/` at the project's root, or $EMBER_HUB_LIBS), and
`load()` imports them from there: torchvision's registrations of its C operators' fake and
autograd kernels are replaced by empty modules (those operators do not exist in this torch and
no classification or segmentation model calls them), and the folder leaves sys.path once both
packages are imported, so other libraries' probes for torchvision see what they saw before.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HUB_LIBS = Path(os.environ.get("EMBER_HUB_LIBS", ROOT / ".hub-libs"))
NEUTRALISED = ("torchvision._meta_registrations", "torchvision._autograd_registrations")


class HubLibsMissing(ImportError):
    """torchvision and timm are not in HUB_LIBS (`make hub-libs` puts them there)."""


def available() -> bool:
    return (HUB_LIBS / "torchvision").is_dir() and (HUB_LIBS / "timm").is_dir()


def load() -> tuple[types.ModuleType, types.ModuleType]:
    """(torchvision, timm), imported from HUB_LIBS."""
    if "torchvision" in sys.modules and "timm" in sys.modules:
        return sys.modules["torchvision"], sys.modules["timm"]
    if not available():
        raise HubLibsMissing(f"torchvision and timm are not in {HUB_LIBS}: run `make hub-libs` (pip install --no-deps "
                             f"--target {HUB_LIBS} torchvision timm)")
    for name in NEUTRALISED:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.path.insert(0, str(HUB_LIBS))
    try:
        import timm
        import torchvision
    finally:
        sys.path.remove(str(HUB_LIBS))
    return torchvision, timm
