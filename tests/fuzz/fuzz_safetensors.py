"""Fuzz target: the safetensors reader (bitnet_onnx.safetensors_file: index_safetensors + load_entry, entry_chunks). See common.py."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import import_instrumented, main  # noqa: E402

(safetensors_file,) = import_instrumented("bitnet_onnx.safetensors_file")


def seeds() -> list[bytes]:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    files = [save({"a": rng.standard_normal((4, 8)).astype(np.float32), "b": np.ones(3, np.float16)}),
             save({"w": np.arange(16, dtype=np.uint16).reshape(2, 8)}, metadata={"format": "pt"})]
    header = json.dumps({"c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    files.append(struct.pack("<Q", len(header)) + header + bytes(8))
    return files


def check(path: Path) -> None:
    for name, entry in safetensors_file.index_safetensors(path).items():
        safetensors_file.load_entry(entry, name)
        for _ in safetensors_file.entry_chunks(entry, name, elements=3):  # the chunked read: 3 values a chunk
            pass


if __name__ == "__main__":
    main(seeds, check, "model.safetensors")
