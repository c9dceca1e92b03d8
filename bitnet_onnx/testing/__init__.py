"""Test support shipped with the package: the test-model factory (used by tests, demo and bench)."""

from bitnet_onnx.testing.factory import SHAPES, make_model

__all__ = ["SHAPES", "make_model"]
