"""Shared test fixtures: tiny factory models and their exports, each built once per session.

``tiny_model(arch, ...)`` and ``tiny_export(model, ...)`` return folders that many modules share:
they are read-only (checked when the session ends). A test that edits a model or an export works
on ``private_copy(folder)``.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest


def _key(options: dict) -> str:
    return json.dumps(options, sort_keys=True, default=str)  # str: Path values


def _state(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(folder.rglob("*")) if f.is_file()}


def _check_unchanged(folders: dict[Path, dict]) -> None:
    changed = [str(folder) for folder, state in folders.items() if _state(folder) != state]
    assert not changed, f"shared test folders were modified (use private_copy): {changed}"


def _model_cache(root: Path, build, states: dict[Path, dict]):
    """get(arch, bitnet=True, dtype="float32", **options): ``build``'s folder, built once per distinct model.

    An option given with make_model's default value names the same model.
    """
    from bitnet_onnx.testing import make_model

    defaults = {name: p.default for name, p in inspect.signature(make_model).parameters.items()
                if p.default is not inspect.Parameter.empty}
    built: dict[str, Path] = {}

    def get(arch: str, bitnet: bool = True, *, dtype: str = "float32", **options) -> Path:
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


@pytest.fixture
def private_copy(tmp_path):
    """private_copy(folder, name=None) -> a copy of a shared folder in this test's tmp_path, free to edit."""

    def copy(folder: Path, name: str | None = None) -> Path:
        return Path(shutil.copytree(folder, tmp_path / (name or Path(folder).name)))

    return copy
