"""Debugging a wrong result: which graph pass changes a model's output (bisect)."""

from .bisect import BisectResult, Trial, bisect

__all__ = ["BisectResult", "Trial", "bisect"]
