"""Who calls the Embedder: each public method wrapped to record (calling module, method) for calls from
outside runtime/embedder.py, so a test can hold a caller to its one call (tests/test_embed_seam.py,
tests/test_integrations_*.py)."""

from __future__ import annotations

import sys

from bitnet_onnx.runtime.embedder import Embedder

EMBEDDER_MODULE = "bitnet_onnx.runtime.embedder"
PUBLIC = ("encode", "encode_query", "encode_document", "prepare", "embed", "run_batch", "finish", "tokenize",
          "quantize", "check_precision", "prompt_length", "resolve_prompt", "calibrate", "ranges")


def record_calls(monkeypatch) -> list[tuple[str, str]]:
    """The list that fills with (calling module, Embedder method) while ``monkeypatch`` is active."""
    seen: list[tuple[str, str]] = []
    for name in PUBLIC:
        original = getattr(Embedder, name)

        def wrapper(self, *args, _name=name, _original=original, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__")
            if caller != EMBEDDER_MODULE:
                seen.append((caller, _name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Embedder, name, wrapper)
    return seen
