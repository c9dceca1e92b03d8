"""The op library itself: its domain, where it is, what it lists (ops, kernel ISAs, its whole dispatch), a ready
SessionOptions. The ops' own modules (i2s_matmul, normalize_nfc, ...) import what they share from
here, never from the package face (``bitnet_onnx.customops`` re-exports all of it)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from bitnet_onnx.errors import BitnetOnnxError

DOMAIN = "bitnet_onnx"
DOMAIN_VERSION = 1  # the one version of the domain the ops implement (customops/ort/domain.h)

LIBRARY_NAME = "libbitnet_onnx_ops.so"
LIBRARY_ENV = "BITNET_ONNX_LIBRARY"  # path of the library to use instead of the installed one
ISA_ENV = "BITNET_ONNX_ISA"  # read by the library: force one kernel ISA (README, environment variables)
# read by the library: how the kernel family is chosen, "measure" (default), "rules" or a family's name (docs/op.md)
KERNEL_ENV = "BITNET_ONNX_KERNEL"
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
    ``BITNET_ONNX_ISA`` names, else the best one this build has and this CPU runs, as the library itself picks
    it (``dispatch(environ).selected_isa``). BitnetOnnxError with the op's own one-line message when the
    variable names an ISA the library refuses."""
    return dispatch(environ).selected_isa()


def selected_kernel_family(environ: Mapping[str, str] | None = None) -> str:
    """How a process with ``environ`` (default: this one's) picks the I2STernaryMatMul kernel family, as the
    library reads ``BITNET_ONNX_KERNEL``: "measure" (unset: timed on the host per shape), "rules" (the
    compiled rules) or the forced family's name (docs/op.md, "Kernel families"). BitnetOnnxError with the
    op's own one-line message when the value would fail the session."""
    family = dispatch(environ).forced_family
    if family.picks is None:
        raise BitnetOnnxError(family.error)
    return family.picks


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


@dataclass(frozen=True)
class AttentionTiles:
    """An ISA record's EncoderAttention tile ops (customops/kernels/attention/dispatch.cc)."""

    f32: str | None  # its float tiles ("avx512", "avx2", "scalar"); None where its row is null in this build
    bf16: str | None  # its bf16 dot-product tiles on this CPU ("amxbf16", "avx512bf16"); None: bf16 runs the
    #                   float tiles on rounded operands ("<f32>:bf16"), or this CPU does not run the ISA
    auto: str | None  # what precision "auto" runs with it, unforced ("f32" or "bf16"); None where the CPU lacks it
    # the head_dim multiple each path above needs (a head_dim it does not divide runs the next path down)
    head_dim_multiple: Mapping[str, int]


@dataclass(frozen=True)
class IsaDispatch(KernelIsa):
    """One record of the ISA table with what every kernel family and the attention driver run on it."""

    kernels: Mapping[str, str | None]  # family name -> its I2SKernel's name here (None: the family has none)
    attention: AttentionTiles


@dataclass(frozen=True)
class FamilyRule:
    """When the driver runs a family other than the base one (customops/kernels/i2s/family.h, FamilyRule):
    on ``isa`` for N >= ``min_n``, when padded(M, block) * cost_percent < 100 * M (and below the others')."""

    isa: str
    min_n: int
    block: int
    cost_percent: int


@dataclass(frozen=True)
class KernelFamily:
    """One row of the family table (customops/kernels/i2s/families.h), in the driver's order."""

    name: str  # a BITNET_ONNX_KERNEL value
    order: int
    base: bool  # the multiply family: every ISA and shape
    rules: tuple[FamilyRule, ...]  # empty: the family runs only when forced (or is the base)


@dataclass(frozen=True)
class ForcedChoice:
    """What the library picks for one variable's value, or the op's one-line error ("" when accepted)."""

    value: str  # the variable's value ("": unset)
    picks: str | None  # ISA: its name; family: the forced name or "auto"; attention precision: what auto runs
    error: str


@dataclass(frozen=True)
class ShapeChoice:
    """The kernel family the driver runs for one call of M tokens against an [N, K] W
    (customops/kernels/i2s/driver.h), and how it was chosen, or why the shape is not one the op takes."""

    m: int | None
    k: int | None
    n: int | None
    # the family's name; None when the ISA or family is refused, the shape is, or its measured choice is not
    # made yet in this process
    runs: str | None
    by: str | None  # "measured" (on this host, per shape), "rules" or "forced"; None when refused
    error: str  # "" when the shape is one the op takes


@dataclass(frozen=True)
class MeasuredShape:
    """A kernel family choice the library measured (or is measuring) in this process for the calls of one ISA,
    [N, K] weight and bucket of M (customops/kernels/i2s/measured_choice.h)."""

    isa: str
    n: int
    k: int
    m_first: int
    m_last: int | None  # None: every larger M
    runs: str | None  # the family chosen; None while measuring
    trials: Mapping[str, int]  # timed calls per family
    ns_per_token: Mapping[str, float | None]  # each family's best time per token

    def describe(self) -> str:
        """One line, e.g. "avx512vnni N=1024 K=2048 M=65-128: lut (mul 41.2 ns/token, lut 33.0)"."""
        m = f"{self.m_first}-{self.m_last}" if self.m_last != self.m_first else f"{self.m_first}"
        times = ", ".join(f"{family} " + (f"{ns:.1f}" if ns is not None else "-")
                          for family, ns in self.ns_per_token.items())
        return (f"{self.isa} N={self.n} K={self.k} M={m if self.m_last is not None else f'{self.m_first}+'}: "
                f"{self.runs or 'measuring'} ({times} ns/token)")


@dataclass(frozen=True)
class Dispatch:
    """The library's whole dispatch as it states it (its ``bitnet_onnx_dispatch``, built from its C++ tables):
    every Python map of ISAs or families derives from this, never from a copy (docs/op.md, "The library's
    dispatch"). Looking up a name the library does not have raises BitnetOnnxError naming it."""

    isas: tuple[IsaDispatch, ...]  # best first
    families: tuple[KernelFamily, ...]  # the driver's order, the base family first
    default_isa: str  # what the library runs with nothing forced
    forced_isa: ForcedChoice  # BITNET_ONNX_ISA
    forced_family: ForcedChoice  # BITNET_ONNX_KERNEL
    forced_attention_precision: ForcedChoice  # BITNET_ONNX_ATTENTION_PRECISION
    shape: ShapeChoice | None  # the family one call of the asked shape runs under the forced values (None: none asked)
    trials_per_family: int  # timed calls of each family before a measured choice is made
    measured: tuple[MeasuredShape, ...]  # the family choices measured in this process so far

    def isa(self, name: str) -> IsaDispatch:
        """The record called ``name``; BitnetOnnxError naming it when the library has none."""
        for record in self.isas:
            if record.name == name:
                return record
        raise BitnetOnnxError(f"ISA {name!r} is not in the library's ISA table ({', '.join(self.isa_names())})")

    def family(self, name: str) -> KernelFamily:
        """The family called ``name``; BitnetOnnxError naming it when the library has none."""
        for family in self.families:
            if family.name == name:
                return family
        raise BitnetOnnxError(f"kernel family {name!r} is not in the library's family table "
                              f"({', '.join(f.name for f in self.families)})")

    def isa_names(self) -> list[str]:
        return [record.name for record in self.isas]

    def running(self) -> list[IsaDispatch]:
        """The records this build has and this CPU runs, best first (scalar always among them)."""
        return [record for record in self.isas if record.runs]

    def base_family(self) -> KernelFamily:
        return next(family for family in self.families if family.base)

    def other_families(self) -> list[KernelFamily]:
        return [family for family in self.families if not family.base]

    def kernel(self, isa: str, family: str) -> str | None:
        """``family``'s kernel on ``isa`` (None where it has none); either name unknown raises naming it."""
        self.family(family)
        return self.isa(isa).kernels[family]

    def selected_isa(self) -> str:
        """The ISA the op runs under the forced value; BitnetOnnxError with the op's message when refused."""
        if self.forced_isa.picks is None:
            raise BitnetOnnxError(self.forced_isa.error)
        return self.forced_isa.picks


def dispatch(environ: Mapping[str, str] | None = None, shape: tuple[int, int, int] | None = None) -> Dispatch:
    """The library's whole dispatch (its ``bitnet_onnx_dispatch``), for a process with ``environ`` (default:
    this one's): every ISA's kernels per family and attention paths, the families and their rules, the ISA it
    runs by default and what ``BITNET_ONNX_ISA``, ``BITNET_ONNX_KERNEL`` and ``BITNET_ONNX_ATTENTION_PRECISION``
    make it pick (or the op's error); with ``shape`` (M, K, N), the family a call of M tokens against an [N, K]
    weight runs there."""
    environ = os.environ if environ is None else environ
    shape_text = ",".join(str(int(size)) for size in shape) if shape is not None else ""
    text = _library_text("bitnet_onnx_dispatch",
                         *(environ.get(name, "") for name in (ISA_ENV, KERNEL_ENV, ATTENTION_PRECISION_ENV)),
                         shape_text)
    return dispatch_from_text(text)


def _attention_tiles(raw: dict) -> AttentionTiles:
    return AttentionTiles(**{**raw, "head_dim_multiple": MappingProxyType(raw["head_dim_multiple"])})


def dispatch_from_text(text: str) -> Dispatch:
    """A dispatch description as bitnet_onnx_dispatch (or customops/tests' dispatch_describe, the same text from
    the kernels alone) writes it; BitnetOnnxError with the text itself when it is the library's one-line error."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise BitnetOnnxError(text.strip()) from None
    isas = tuple(IsaDispatch(r["name"], r["built"], r["runs"], r["needs"], MappingProxyType(dict(r["kernels"])),
                             _attention_tiles(r["attention"])) for r in raw["isas"])
    families = tuple(KernelFamily(f["name"], f["order"], f["base"], tuple(FamilyRule(**rule) for rule in f["rules"]))
                     for f in raw["families"])
    forced = raw["forced"]
    precision = forced["attention_precision"]
    measured = tuple(MeasuredShape(**{**m, "trials": MappingProxyType(m["trials"]),
                                      "ns_per_token": MappingProxyType(m["ns_per_token"])}) for m in raw["measured"])
    return Dispatch(isas, families, raw["default_isa"], ForcedChoice(**forced["isa"]), ForcedChoice(**forced["family"]),
                    ForcedChoice(precision["value"], precision["auto"], precision["error"]),
                    ShapeChoice(**forced["shape"]) if forced["shape"] is not None else None,
                    raw["trials_per_family"], measured)


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
