"""Fuzz target: the export manifest reader (Manifest.read of bitnet_onnx.json). See common.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import import_instrumented, main  # noqa: E402

(manifest,) = import_instrumented("bitnet_onnx.manifest")


def seeds() -> list[bytes]:
    manifest = {"arch": "qwen3", "weights": "i2s", "pooling": "lasttoken", "normalize": True, "dimension": 128,
                "hidden_size": 128, "max_length": 512, "padding_side": "left", "pad_token_id": 0,
                "append_eos_token_id": 440, "prompts": {"query": "Instruct: "}, "default_prompt_name": None,
                "format_version": 1, "custom_ops": ["I2STernaryMatMul"], "needs_custom_ops": True}
    return [json.dumps(manifest).encode(), json.dumps({**manifest, "pooling": "mean", "nbits": 4}).encode()]


def check(path: Path) -> None:
    manifest.Manifest.read(path.parent)


if __name__ == "__main__":
    main(seeds, check, "bitnet_onnx.json")
