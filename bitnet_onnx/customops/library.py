"""The op library itself: its domain, where it is, what it lists (ops, kernel ISAs), a ready
SessionOptions. The ops' own modules (i2s_matmul, normalize_nfc, ...) import what they share from
here, never from the package face (``bitnet_onnx.customops`` re-exports all of it)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bitnet_onnx.errors import BitnetOnnxError

DOMAIN = "bitnet_onnx"
DOMAIN_VERSION = 1  # the one version of the domain the ops implement (customops/ort/domain.h)

LIBRARY_NAME = "libbitnet_onnx_ops.so"
LIBRARY_ENV = "BITNET_ONNX_LIBRARY"  # path of the library to use instead of the installed one
ISA_ENV = "BITNET_ONNX_ISA"  # read by the library: force one kernel ISA (README, environment variables)
KERNEL_ENV = "BITNET_ONNX_KERNEL"  # read by the library: force a kernel family, lut or mul (docs/op.md)
# read by the library: what EncoderAttention's precision "auto" runs, f32 or bf16 (docs/attention.md)
ATTENTION_PRECISION_ENV = "BITNET_ONNX_ATTENTION_PRECISION"


@dataclass(frozen=True)
class KernelIsa:
    """One record of the library's ISA table (customops/kernels/isa.h)."""

    name: str  # a BITNET_ONNX_ISA value
    built: bool  # this build of the library has its kernels
    runs: bool  # this CPU (and OS) runs them
    needs: str  # what the CPU must provide


def library_path() -> str:
    """Absolute path of the op library.

    ``$BITNET_ONNX_LIBRARY`` if set; otherwise the library CMake installed into the ``bitnet_onnx``
    package. The package's search path covers both installs: a wheel puts it next to this file,
    an editable scikit-build-core install in ``site-packages/bitnet_onnx/`` (listed in
    ``bitnet_onnx.__path__`` next to the source folder).
    """
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise BitnetOnnxError(f"{LIBRARY_ENV}={override}: no such file")
        return str(path.resolve())
    package = importlib.util.find_spec("bitnet_onnx")  # no import: the package root is the public facade
    searched = [Path(p) for p in package.submodule_search_locations]
    for folder in searched:
        candidate = folder / LIBRARY_NAME
        if candidate.is_file():
            return str(candidate.resolve())
    raise BitnetOnnxError(
        f"op library {LIBRARY_NAME} not found in {', '.join(map(str, searched))}; build and install it with "
        f"`pip install .` (or `pip install --no-build-isolation -e .`) in the bitnet-onnx checkout, "
        f"or set {LIBRARY_ENV}"
    )


def _library_text(symbol: str, *args: str) -> str:
    """What the library's ``const char* symbol(const char*...)`` returns for ``args``."""
    path = library_path()
    lib = ctypes.CDLL(path)
    try:
        function = getattr(lib, symbol)
    except AttributeError:
        raise BitnetOnnxError(f"op library {path} has no {symbol} (an older build): rebuild it") from None
    function.argtypes = [ctypes.c_char_p] * len(args)
    function.restype = ctypes.c_char_p
    return function(*(arg.encode() for arg in args)).decode()


def library_kernels() -> list[KernelIsa]:
    """The library's kernel ISAs, best first, as it lists them (its ``bitnet_onnx_kernel_names``):
    every name ``BITNET_ONNX_ISA`` accepts, whether this build has it and whether this CPU runs it."""
    records = []
    for line in _library_text("bitnet_onnx_kernel_names").splitlines():
        name, built, runs, needs = line.split("\t")
        records.append(KernelIsa(name, built == "1", runs == "1", needs))
    return records


def selected_isa(environ: Mapping[str, str] | None = None) -> str:
    """The kernel ISA the library runs in a process with ``environ`` (default: this one's): the record
    ``BITNET_ONNX_ISA`` names, else the best one this build has and this CPU runs (the rule of
    select_isa, customops/kernels/isa.h, over the table the library itself lists)."""
    forced = (os.environ if environ is None else environ).get(ISA_ENV, "")
    records = library_kernels()
    if not forced:
        return next(r.name for r in records if r.built and r.runs)  # scalar always runs
    record = next((r for r in records if r.name == forced), None)
    if record is None or not (record.built and record.runs):
        why = "unknown" if record is None else "not run by this build or CPU"
        raise BitnetOnnxError(f"{ISA_ENV}={forced}: {why}; this library runs "
                              f"{', '.join(r.name for r in records if r.built and r.runs)}")
    return record.name


def selected_kernel_family(environ: Mapping[str, str] | None = None) -> str:
    """The I2STernaryMatMul kernel family a process with ``environ`` (default: this one's) runs: the one
    ``BITNET_ONNX_KERNEL`` forces (the library checks the name when a session creates the op's kernel), else
    "auto", the op's per-call rules (docs/op.md, "Kernel families")."""
    return (os.environ if environ is None else environ).get(KERNEL_ENV) or "auto"


def attention_auto_precision(environ: Mapping[str, str] | None = None) -> str:
    """What EncoderAttention's ``precision="auto"`` runs in a process with ``environ`` (default: this one's),
    "f32" or "bf16", as the library itself decides it (its ``bitnet_onnx_attention_auto_precision``: the
    rule of customops/kernels/attention/dispatch.cc under BITNET_ONNX_ISA and BITNET_ONNX_ATTENTION_PRECISION).
    BitnetOnnxError with the op's own message when either variable would fail the session."""
    environ = os.environ if environ is None else environ
    answer = _library_text("bitnet_onnx_attention_auto_precision",
                           *(environ.get(name, "") for name in (ISA_ENV, ATTENTION_PRECISION_ENV)))
    if answer not in ("f32", "bf16"):
        raise BitnetOnnxError(answer)
    return answer


@dataclass(frozen=True)
class AttentionPath:
    """Which EncoderAttention tile ops run a node (the driver's choice, attention::Attention::path_for)."""

    name: str  # attention_kernel_test's path names: "amxbf16", "avx512bf16", "avx512", "avx512:bf16", "scalar", ...
    fallback: str  # "" when the ISA's own path runs; else why it did not (a forced ISA refuses the call instead)


def attention_path(precision: str, head_dim: int, environ: Mapping[str, str] | None = None) -> AttentionPath:
    """The tile ops an EncoderAttention node of ``precision`` ("f32", "bf16" or "auto") and ``head_dim`` runs in
    a process with ``environ`` (default: this one's), as the library's driver decides it (its
    ``bitnet_onnx_attention_path``). BitnetOnnxError with the library's message when the variables would
    fail the session, or the arguments are not a precision and a positive head dim."""
    environ = os.environ if environ is None else environ
    answer = _library_text("bitnet_onnx_attention_path",
                           *(environ.get(name, "") for name in (ISA_ENV, ATTENTION_PRECISION_ENV)),
                           str(precision), str(head_dim))
    if "\t" not in answer:
        raise BitnetOnnxError(answer)
    name, fallback = answer.split("\t", 1)
    return AttentionPath(name, fallback)


def library_ops() -> tuple[str, list[str]]:
    """(domain, op names) as the library itself lists them (its ``bitnet_onnx_op_names`` symbol)."""
    domain, _, names = _library_text("bitnet_onnx_op_names").partition(":")
    return domain, [n for n in names.split(",") if n]


def session_options(threads: int | None = None, extensions: bool = False, op_library: bool = True):
    """A new ``onnxruntime.SessionOptions`` with the op library registered.

    ``threads`` sets ``intra_op_num_threads`` (the ops split their work on ORT's intra-op pool).
    ``extensions`` also registers onnxruntime-extensions' library (the tokenizer of a strings-in
    graph, the manifest's ``text_model_file``); ``op_library=False`` leaves ours out (ORT-native variants).
    """
    import onnxruntime as ort

    if threads is not None and (not isinstance(threads, int) or threads < 0):
        raise BitnetOnnxError(f"threads must be an integer >= 0 (0 = ORT default), got {threads!r}")
    so = ort.SessionOptions()
    if op_library:
        so.register_custom_ops_library(library_path())
    if extensions:
        so.register_custom_ops_library(extensions_library_path())
    if threads is not None:
        so.intra_op_num_threads = threads
    return so


def extensions_library_path() -> str:
    """onnxruntime-extensions' custom op library, as its Python package ships it (its
    ``_extensions_pydll`` module, what ``get_library_path()`` returns), found without importing the
    package: its ``__init__`` imports transformers and torch when they are installed."""
    import glob
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_extensions")
    if spec is None or not spec.submodule_search_locations:
        raise BitnetOnnxError("onnxruntime-extensions is not installed (pip install 'bitnet-onnx[text]'); "
                              "a strings-in graph (export --text-input) needs its tokenizer op")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            found = glob.glob(os.path.join(folder, "_extensions_pydll" + suffix))
            if found:
                return found[0]
    raise BitnetOnnxError(f"onnxruntime-extensions in {', '.join(spec.submodule_search_locations)} has no "
                          "_extensions_pydll library; reinstall it")
