"""Writes an exported folder atomically (bitnet_onnx.io.atomic_folder: a temp folder renamed at the end).

Weights of more than 64 MiB go to one external data file next to model.onnx (a plain file, no
symlinks: ORT rejects those since 1.24). ORT memory-maps that file and uses it in place, while an
inline model is held twice during loading (parsed protobuf + ORT's copy): for Qwen3-0.6B i2s the
peak RSS at load drops from 1.9x to 0.7x of the file (BENCHMARKS.md). Small models stay one file;
protobuf could not hold more than 2 GB inline anyway.

The weights reach that file while the graph is built (``WeightFile``, in the temp folder the export
becomes): each array is written once, from its own memory, and dropped; no proto holds a copy of
every weight before the save, which was the export's peak memory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx.external_data_helper import load_external_data_for_tensor

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_folder, check_apart, check_input_file, check_replaceable_folder
from bitnet_onnx.manifest import EXTERNAL_DATA_NAME, MANIFEST_NAME, MODEL_NAME, Manifest
from bitnet_onnx.export.text_input import save_text_model

EXTERNAL_DATA_THRESHOLD = 64 << 20  # weight bytes above which they go to EXTERNAL_DATA_NAME
EXTERNAL_TENSOR_MIN_BYTES = 1024  # a smaller tensor stays in model.onnx (the size_threshold onnx's save was given)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")


class WeightFile:
    """The export's external data file (EXTERNAL_DATA_NAME in ``folder``), filled while the graph is built
    (a context manager: closed when the build ends): ``add`` writes a large initializer's bytes at the
    file's end and points the tensor there, as onnx's own save would (one file, tensors back to back, in
    the graph's order). Then ``inline_if_small``: a model whose weights come to no more than
    EXTERNAL_DATA_THRESHOLD gets them back inline, and no file."""

    def __init__(self, folder: Path):
        self.path = folder / EXTERNAL_DATA_NAME
        self._file = open(self.path, "xb")  # closed by __exit__: the build runs inside `with WeightFile(...)`
        self._tensors: list[onnx.TensorProto] = []

    def __enter__(self) -> WeightFile:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def add(self, tensor: onnx.TensorProto, array: np.ndarray) -> bool:
        """Writes ``array`` (C-contiguous) for ``tensor``; False for a small one, which stays inline."""
        if array.nbytes < EXTERNAL_TENSOR_MIN_BYTES:
            return False
        offset = self._file.tell()
        self._file.write(array.reshape(-1).view(np.uint8))  # bytes of any dtype (ml_dtypes' have no buffer format)
        tensor.data_location = onnx.TensorProto.EXTERNAL  # by hand: onnx's set_external_data wants raw_data set
        for key, value in (("location", EXTERNAL_DATA_NAME), ("offset", offset), ("length", array.nbytes)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self._tensors.append(tensor)
        return True

    def inline_if_small(self, weight_bytes: int) -> None:
        """After the build: ``weight_bytes`` (every initializer's) at most EXTERNAL_DATA_THRESHOLD puts the
        file's tensors back into the graph and removes it."""
        if weight_bytes > EXTERNAL_DATA_THRESHOLD:
            return
        for tensor in self._tensors:  # at most EXTERNAL_DATA_THRESHOLD in all
            load_external_data_for_tensor(tensor, str(self.path.parent))
        self.path.unlink()


def save_model(model: onnx.ModelProto, folder: Path) -> Path:
    """model.onnx; its large weights are in the folder's WeightFile already (onnx's save leaves tensors
    that point at external data as they are)."""
    path = folder / MODEL_NAME
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


@contextmanager
def export_folder(out_dir: Path, overwrite: bool = False) -> Iterator[Path]:
    """The temp folder an export is built and written in; it becomes ``out_dir`` when the block ends
    (bitnet_onnx.io.atomic_folder: removed instead on any error or signal)."""
    with atomic_folder(out_dir, overwrite, ours=is_export_folder) as tmp:
        yield tmp


def write_folder(folder: Path, model: onnx.ModelProto, manifest: Manifest, source: Path,
                 text_pre: onnx.ModelProto | None = None, add_files: Callable[[Path], None] | None = None) -> None:
    """Writes the export into ``folder`` (export_folder's), beside the WeightFile that ``model``'s
    weights went to. ``text_pre``: the strings-in pre-processing graph (export --text-input), saved in
    front of the model as manifest.text_model_file, after model.onnx so that both share its external
    data. ``add_files(folder)``: writes further files into the folder (export --layout hf); a callback
    so that the writer needs no knowledge of other layouts."""
    path = save_model(model, folder)
    check_model(path, manifest.needs_custom_ops)
    if text_pre is not None:
        check_model(save_text_model(folder, text_pre, model), manifest.needs_op_library(text=True))
    copy_tokenizer(source, folder)
    if add_files is not None:
        add_files(folder)
    manifest.write(folder)
