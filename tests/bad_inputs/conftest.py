"""The corpus' shared inputs, built once per session (read-only: each case works on copies)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def corpus_sources(tiny_model, tiny_export, tmp_path_factory) -> dict[str, Path]:
    """Placeholder -> shared folder or file (tests/bad_inputs/cases.py names them)."""
    import onnx

    from bitnet_onnx.convert_gguf.writer import convert

    model = tiny_model("qwen3")
    export = tiny_export(model, "f32")
    root = tmp_path_factory.mktemp("corpus-sources")
    external = Path(shutil.copytree(export, root / "external"))
    onnx.save_model(onnx.load(str(export / "model.onnx")), str(external / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    gguf = convert(model, root / "model.gguf", "f16", pre_tokenizer="qwen2")
    return {"model": model, "gemma": tiny_model("gemma3"), "export": export, "external": external, "gguf": Path(gguf)}
