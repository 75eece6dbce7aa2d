"""Operators of the ai.onnx.ml domain."""

from __future__ import annotations

ML = "ai.onnx.ml"
