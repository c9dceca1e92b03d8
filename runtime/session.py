"""The ONNX Runtime session of an exported folder, with clear errors for everything that can be wrong.

The op library is registered only when the manifest says the graph uses I2STernaryMatMul
(``needs_custom_ops``); the ORT baselines (f32, int8, nbits) run on the stock wheel alone.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from packaging.version import Version

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import check_input_file
from bitnet_onnx.manifest import EXTERNAL_DATA_FILES, PROMPT_INPUT, PROMPT_LENGTH_INPUT, TEXT_INPUT, Manifest

INPUTS = ("input_ids", "attention_mask")
TEXT_INPUTS = (TEXT_INPUT,)  # strings in
# Inputs a graph may have besides those: the prompt length of include_prompt: false models (ids in),
# the prompt (strings in; of ONNX optional type, its default in the graph)
OPTIONAL_INPUTS = {INPUTS: (PROMPT_LENGTH_INPUT,), TEXT_INPUTS: (PROMPT_INPUT,)}
MASK_OUTPUT = "attention_mask"  # an output of the strings-in graph
SENTENCE_OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "token_embeddings"


def create_session(folder: str | Path, manifest: Manifest, threads: int | None = None, text: bool = False,
                   profile_prefix: str | None = None):
    """An ``onnxruntime.InferenceSession`` on the folder's model, CPU provider, ``threads`` intra-op threads.

    ``text``: the strings-in model (``text_model_file``, export --text-input) instead of the token-ids
    model, with the libraries its tokenizer needs (the manifest's ``text_custom_ops``, and
    onnxruntime-extensions' when ``text_needs_extensions``).
    ``profile_prefix``: ORT's profiler on, its trace written to that prefix (ORT appends a timestamp
    and .json; ``session.end_profiling()`` returns the file's name).
    """
    import onnxruntime as ort

    folder = Path(folder)
    if text and not manifest.text_model_file:
        raise BitnetOnnxError(f"{folder}: has no strings-in model (export it with --text-input)")
    model_path = folder / (manifest.text_model_file if text else manifest.model_file)
    if not os.path.lexists(model_path):
        raise BitnetOnnxError(f"{model_path}: model file missing")
    check_input_file(model_path)  # onnxruntime opens it itself: a FIFO would block it
    for name in EXTERNAL_DATA_FILES:  # where export's writer puts the weights; ORT opens them itself too
        external_data = folder / name
        if os.path.lexists(external_data):
            check_input_file(external_data, f"{external_data} (the external data of {model_path.name})")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise BitnetOnnxError(f"threads must be a positive integer, got {threads!r}")
    _check_ort_version(ort.__version__, manifest.min_onnxruntime, folder)

    if manifest.needs_custom_ops or text:
        _check_domain_version(model_path)
        options = manifest_session_options(manifest, threads, text)
    else:
        options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # log_severity_level stays unset (-1: ORT's default logger, whose level a user sets with
    # onnxruntime.set_default_logger_severity): our graphs load without a warning at ORT's default
    # level (tests/test_quiet_load.py), so quiet needs no override of the user's choice.
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    try:
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise BitnetOnnxError(_load_error(model_path, manifest, e)) from None
    _check_io(session, model_path, TEXT_INPUTS if text else INPUTS)
    return session


def _check_domain_version(model_path: Path) -> None:
    """ORT matches custom ops by name whatever version of their domain a graph imports, so the
    version check is ours: a graph importing another version than the library's is refused."""
    from bitnet_onnx import customops

    try:
        imported = _opset_imports(model_path).get(customops.DOMAIN)
    except Exception:  # a corrupt file: ORT's load reports it below
        return
    if imported is not None and imported != customops.DOMAIN_VERSION:
        raise BitnetOnnxError(f"{model_path}: imports domain {customops.DOMAIN!r} version {imported}; this op library "
                              f"implements version {customops.DOMAIN_VERSION} (a newer bitnet-onnx wrote it?)")


def _opset_imports(model_path: Path) -> dict[str, int]:
    """The model's opset imports, domain -> version (the last one named, as onnx's list read into a dict)."""
    model = _opset_import_reader()()
    model.ParseFromString(Path(model_path).read_bytes())
    return {o.domain: o.version for o in model.opset_import}


@functools.cache
def _opset_import_reader():
    """A protobuf message class of onnx.proto's ModelProto that declares only ``opset_import`` (field 8,
    OperatorSetIdProto: domain 1, version 2); protobuf steps over the other fields, the graph among them,
    unparsed. Not the onnx package: its import took 0.8-1.1 s on a Zen 4 core (ml_dtypes registering
    its ufunc loops), most of ``bitnet-onnx embed``'s start on an i2s export and more than the session
    of a small one; this reads the same field (tests/test_op_validation.py compares the two)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="bitnet_onnx_opset_imports.proto", package="bitnet_onnx_opsets",
                                               syntax="proto2")
    opset = proto.message_type.add(name="OperatorSetIdProto")
    opset.field.add(name="domain", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    opset.field.add(name="version", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    model = proto.message_type.add(name="ModelProto")
    model.field.add(name="opset_import", number=8, type=field.TYPE_MESSAGE, label=field.LABEL_REPEATED,
                    type_name=".bitnet_onnx_opsets.OperatorSetIdProto")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bitnet_onnx_opsets.ModelProto"))


def manifest_session_options(manifest: Manifest, threads: int | None = None, text: bool = False):
    """SessionOptions with the libraries the folder's model (``text``: its strings-in model) needs, as its
    manifest names them (bitnet_onnx.customops owns the how); ORT's default log level."""
    from bitnet_onnx import customops

    try:
        return customops.session_options(threads=threads, extensions=text and manifest.text_needs_extensions,
                                         op_library=manifest.needs_op_library(text))
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
    return _external_data_problem(model_path) or f"{model_path}: onnxruntime could not load the model: {text}"


def _external_data_problem(model_path: Path) -> str | None:
    """The message naming a missing or truncated external data file (model.onnx.data) of the model, if one is."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return None
    for tensor in model.graph.initializer:
        if not uses_external_data(tensor):
            continue
        info = ExternalDataInfo(tensor)
        data = model_path.parent / info.location
        if not data.is_file():
            return f"{data}: missing or not a file (the external data of {model_path.name}, tensor {tensor.name})"
        end, size = (info.offset or 0) + (info.length or 0), data.stat().st_size
        if end > size:
            return (f"{data}: truncated ({size} bytes; tensor {tensor.name} of {model_path.name} "
                    f"needs bytes up to {end})")
    return None


def _check_io(session, model_path: Path, expected: tuple[str, ...] = INPUTS) -> None:
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    optional = OPTIONAL_INPUTS[expected]
    if sorted(n for n in inputs if n not in optional) != sorted(expected) or SENTENCE_OUTPUT not in outputs:
        raise BitnetOnnxError(f"{model_path}: expected inputs {list(expected)} and output {SENTENCE_OUTPUT!r}, "
                              f"found inputs {inputs} and outputs {outputs}")


def _check_ort_version(have: str, need: str, folder: Path) -> None:
    if not runs_on_onnxruntime(have, need):
        raise BitnetOnnxError(f"{folder}: needs onnxruntime >= {need}, this is {have}")


def runs_on_onnxruntime(have: str, need: str) -> bool:
    """Whether onnxruntime ``have`` runs an export whose manifest asks for ``need`` (its min_onnxruntime)."""
    return Version(have) >= Version(need)


def first_line(e: Exception) -> str:
    """The first line of an exception's message (ORT and tokenizers errors run long)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
