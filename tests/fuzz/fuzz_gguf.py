"""Fuzz target: the GGUF reader (gguf_file.open_gguf, the inspect verb's describe, tensor decoding). See common.py."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import import_instrumented, main  # noqa: E402

_, inspect, gguf_file = import_instrumented("gguf", "bitnet_onnx.convert_gguf.inspect", "bitnet_onnx.gguf_file",
                                            include=("bitnet_onnx", "gguf"))


def seeds() -> list[bytes]:
    import gguf
    import numpy as np

    gguf_file.register_i2s()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        w = gguf.GGUFWriter(str(path), "qwen3")
        w.add_uint32("qwen3.block_count", 1)
        w.add_float32("qwen3.rope.freq_base", 1e6)
        w.add_token_list(["a", "b", "<eos>"])
        w.add_token_scores([0.0, -1.0, 0.5])
        w.add_string("general.name", "seed")
        w.add_tensor("token_embd.weight", np.ones((3, 32), np.float16))
        w.add_tensor("output_norm.weight", np.ones(32, np.float32))
        i2s = np.zeros(gguf_file.i2s_nbytes(4, 128), np.int8)
        w.add_tensor("blk.0.ffn_up.weight", i2s, raw_shape=(4, 128), raw_dtype=gguf.GGMLQuantizationType(gguf_file.I2S_TYPE))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return [path.read_bytes()]


def check(path: Path) -> None:
    inspect.describe(path, full=True)
    reader = gguf_file.open_gguf(path)
    for tensor in reader.tensors:
        if int(tensor.tensor_type) == gguf_file.I2S_TYPE:
            gguf_file.read_i2s(reader, tensor)
        else:
            try:
                gguf_file.dequantize(reader, tensor)
            except ValueError:
                pass  # its documented error: GgufModel.tensor turns it into a BitnetOnnxError naming the tensor


if __name__ == "__main__":
    main(seeds, check, "model.gguf")
