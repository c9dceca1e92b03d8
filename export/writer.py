"""Writes an exported folder atomically (bitnet_onnx.io.atomic_folder: a temp folder renamed at the end).

Weights of more than 64 MiB go to one external data file next to model.onnx (a plain file, no
symlinks: ORT rejects those since 1.24). ORT memory-maps that file and uses it in place, while an
inline model is held twice during loading (parsed protobuf + ORT's copy): for Qwen3-0.6B i2s the
peak RSS at load drops from 1.9x to 0.7x of the file (BENCHMARKS.md). Small models stay one file;
protobuf could not hold more than 2 GB inline anyway.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_folder, check_apart, check_input_file, check_replaceable_folder
from bitnet_onnx.manifest import EXTERNAL_DATA_NAME, MANIFEST_NAME, MODEL_NAME, Manifest
from bitnet_onnx.export.text_input import save_text_model

EXTERNAL_DATA_THRESHOLD = 64 << 20  # weight bytes above which they go to EXTERNAL_DATA_NAME
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")


def save_model(model: onnx.ModelProto, folder: Path, weight_bytes: int) -> Path:
    path = folder / MODEL_NAME
    if weight_bytes > EXTERNAL_DATA_THRESHOLD:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=EXTERNAL_DATA_NAME, size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
    return path


def check_model(path: Path, uses_custom_op: bool) -> None:
    """onnx.checker on the saved file (by path, so external data and > 2 GB models work)."""
    if uses_custom_op:
        from bitnet_onnx import customops

        customops.register_onnx_schema()
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as e:  # a bug of ours, but a verb's error is one line
        raise BitnetOnnxError(f"{path}: the written graph fails onnx.checker: {str(e).splitlines()[0]}") from e


def copy_tokenizer(source: Path, folder: Path) -> None:
    if not os.path.lexists(source / "tokenizer.json"):
        raise BitnetOnnxError(f"{source}: tokenizer.json is missing (the exported folder needs it to tokenize)")
    for name in TOKENIZER_FILES:
        if os.path.lexists(source / name):  # a FIFO or device there is refused, not copied without end
            shutil.copyfile(check_input_file(source / name), folder / name)  # not copy2: modes follow the umask


def is_export_folder(path: Path) -> bool:
    """A folder this tool wrote (it has our manifest): the only kind --overwrite replaces."""
    return (path / MANIFEST_NAME).is_file()


def check_output(out_dir: str | Path, inputs: list[str | Path], overwrite: bool) -> None:
    """The output-safety rule (bitnet_onnx.io) for an export folder; call before the slow part."""
    check_apart(out_dir, inputs, what="-o/--output")
    check_replaceable_folder(Path(out_dir), overwrite, ours=is_export_folder)


def write_folder(out_dir: Path, model: onnx.ModelProto, manifest: Manifest, source: Path, weight_bytes: int,
                 overwrite: bool = False, text_pre: onnx.ModelProto | None = None,
                 add_files: Callable[[Path], None] | None = None) -> Path:
    """``text_pre``: the strings-in pre-processing graph (export --text-input), saved in front of the
    model as manifest.text_model_file, after model.onnx so that both share its external data.
    ``add_files(folder)``: writes further files into the folder before it is put in place (export
    --layout hf); a callback so that the writer needs no knowledge of other layouts."""
    with atomic_folder(out_dir, overwrite, ours=is_export_folder) as tmp:
        path = save_model(model, tmp, weight_bytes)
        check_model(path, manifest.needs_custom_ops)
        if text_pre is not None:
            check_model(save_text_model(tmp, text_pre, model), manifest.needs_op_library(text=True))
        copy_tokenizer(source, tmp)
        if add_files is not None:
            add_files(tmp)
        manifest.write(tmp)
    return Path(out_dir)
