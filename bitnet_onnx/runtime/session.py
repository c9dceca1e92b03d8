"""The ONNX Runtime session of an exported folder, with clear errors for everything that can be wrong.

The op library is registered only when the manifest says the graph uses I2STernaryMatMul
(``needs_custom_ops``); the ORT baselines (f32, int8, nbits) run on the stock wheel alone.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest

INPUTS = ("input_ids", "attention_mask")
SENTENCE_OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "token_embeddings"


def create_session(folder: str | Path, manifest: Manifest, threads: int | None = None):
    """An ``onnxruntime.InferenceSession`` on the folder's model, CPU provider, ``threads`` intra-op threads."""
    import onnxruntime as ort

    folder = Path(folder)
    model_path = folder / manifest.model_file
    if not model_path.is_file():
        raise BitnetOnnxError(f"{model_path}: model file missing")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise BitnetOnnxError(f"threads must be a positive integer, got {threads!r}")
    _check_ort_version(ort.__version__, manifest.min_onnxruntime, folder)

    options = _session_options(manifest, threads) if manifest.needs_custom_ops else ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: ORT's warnings would clutter a CLI's stderr
    try:
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise BitnetOnnxError(_load_error(model_path, manifest, e)) from None
    _check_io(session, model_path)
    return session


def _session_options(manifest: Manifest, threads: int | None):
    """SessionOptions with the op library registered (bitnet_onnx.customops owns the how)."""
    from bitnet_onnx import customops

    try:
        return customops.session_options(threads=threads)
    except BitnetOnnxError:
        raise
    except Exception as e:  # ORT's Fail on a file that is not a loadable library, OSError, ...
        try:
            where = str(customops.library_path())
        except Exception:
            where = "the bitnet-onnx op library"
        raise BitnetOnnxError(f"{where}: op library could not be loaded ({first_line(e)}); "
                              f"rebuild with 'pip install .' or point BITNET_ONNX_LIBRARY at a built library") from None


def _load_error(model_path: Path, manifest: Manifest, e: Exception) -> str:
    text = first_line(e)
    if "INVALID_PROTOBUF" in text or "Protobuf parsing failed" in text:
        return f"{model_path}: not a valid ONNX model (corrupt or truncated file?)"
    if "is not a registered function/op" in text or "No opset import for domain" in text:
        hint = "" if manifest.needs_custom_ops else " (the manifest says needs_custom_ops is false)"
        return f"{model_path}: uses an operator this onnxruntime does not know{hint}: {text}"
    return f"{model_path}: onnxruntime could not load the model: {text}"


def _check_io(session, model_path: Path) -> None:
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if sorted(inputs) != sorted(INPUTS) or SENTENCE_OUTPUT not in outputs:
        raise BitnetOnnxError(f"{model_path}: expected inputs {list(INPUTS)} and output {SENTENCE_OUTPUT!r}, "
                              f"found inputs {inputs} and outputs {outputs}")


def _check_ort_version(have: str, need: str, folder: Path) -> None:
    if Version(have) < Version(need):
        raise BitnetOnnxError(f"{folder}: needs onnxruntime >= {need}, this is {have}")


def first_line(e: Exception) -> str:
    """The first line of an exception's message (ORT and tokenizers errors run long)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
