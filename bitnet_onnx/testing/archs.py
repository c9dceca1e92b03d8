"""One testing record per architecture of ``arch.ARCHITECTURES`` (``tests/test_arch.py`` checks that
every architecture has one)."""

from __future__ import annotations

from bitnet_onnx.testing.arch_testing import ArchTesting
from bitnet_onnx.testing.gemma3 import GEMMA3
from bitnet_onnx.testing.qwen3 import QWEN3

TESTING_ARCHS: dict[str, ArchTesting] = {t.name: t for t in (QWEN3, GEMMA3)}
