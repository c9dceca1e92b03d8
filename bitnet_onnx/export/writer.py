"""Writes an exported folder atomically: build in a temp folder next to OUT_DIR, rename at the end.

Weights of more than 64 MiB go to one external data file next to model.onnx (a plain file, no
symlinks: ORT rejects those since 1.24). ORT memory-maps that file and uses it in place, while an
inline model is held twice during loading (parsed protobuf + ORT's copy): for Qwen3-0.6B i2s the
peak RSS at load drops from 1.9x to 0.7x of the file (BENCHMARKS.md). Small models stay one file;
protobuf could not hold more than 2 GB inline anyway.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import onnx

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import MODEL_NAME, Manifest

EXTERNAL_DATA_NAME = MODEL_NAME + ".data"
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
    onnx.checker.check_model(str(path))


def copy_tokenizer(source: Path, folder: Path) -> None:
    if not (source / "tokenizer.json").is_file():
        raise BitnetOnnxError(f"{source}: tokenizer.json is missing (the exported folder needs it to tokenize)")
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_folder(out_dir: Path, model: onnx.ModelProto, manifest: Manifest, source: Path, weight_bytes: int,
                 overwrite: bool = False) -> Path:
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise BitnetOnnxError(f"{out_dir}: already exists; pass --overwrite to replace it")
    if out_dir.exists() and not out_dir.is_dir():
        raise BitnetOnnxError(f"{out_dir}: exists and is not a folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the result is an ordinary folder
        path = save_model(model, tmp, weight_bytes)
        check_model(path, manifest.needs_custom_ops)
        copy_tokenizer(source, tmp)
        manifest.write(tmp)
        if out_dir.exists():  # --overwrite: swap, then drop the old folder
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            out_dir.rename(old / "previous")
            tmp.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
