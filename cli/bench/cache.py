"""The bench cache: random-weight models of real shapes (``--shape``) and exports of every variant.

Entries are keyed by content hashes (the model folder's bytes, the variant, the code that builds
them), so a changed model or exporter never reuses a stale entry; older entries of the same model
and variant are removed when a new one is built. Entries appear atomically (built in a temp folder,
then renamed), so an interrupted build leaves nothing that looks complete.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bitnet_onnx.bench.report import progress
from bitnet_onnx.bench.variants import build_variant
from bitnet_onnx.io import atomic_folder
from bitnet_onnx.testing.factory import SHAPES
from bitnet_onnx.version import __version__

EXPORT_CODE = ("bitnet_onnx", "bitnet_onnx.export", "bitnet_onnx.bench.variants")  # core, exporter, builders
FACTORY_CODE = ("bitnet_onnx.arch", "bitnet_onnx.testing")
CODE_HASH_DIGITS = 16


def model_shapes() -> dict[str, tuple[str, str]]:
    """``--shape`` names -> (architecture, factory shape): the factory's real shapes by their own names,
    then its tiny ones as "<arch>-tiny" (quick checks of the bench itself)."""
    names = {shape if shape.startswith(f"{arch}-") else f"{arch}-{shape}": (arch, shape)
             for arch, shapes in SHAPES.items() for shape in shapes}
    return dict(sorted(names.items(), key=lambda item: item[1][1] == "tiny"))  # stable: real shapes first


def cache_dir(explicit: str | Path | None = None) -> Path:
    """``explicit``, else $XDG_CACHE_HOME/bitnet-onnx or ~/.cache/bitnet-onnx; created."""
    if explicit:
        root = Path(explicit)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bitnet-onnx"
    root.mkdir(parents=True, exist_ok=True)
    return root


def code_hash(*modules: str) -> str:
    """Hash of the package version and the Python sources of ``modules`` (a package: the .py files of
    its folder, not its subpackages)."""
    h = hashlib.sha256(__version__.encode())
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec.submodule_search_locations:
            files = sorted(f for d in spec.submodule_search_locations for f in Path(d).glob("*.py"))
        else:
            files = [Path(spec.origin)]
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:CODE_HASH_DIGITS]


def folder_hash(folder: Path) -> str:
    """Content hash of a model folder: every file's relative path and bytes."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def shape_model(name: str, cache: Path, log: Callable[[str], None] = progress) -> Path:
    """A random-weight BitNet model of a ``model_shapes()`` shape (seed 0), generated once into the cache."""
    from bitnet_onnx.testing import make_model

    folder = cache / "models" / f"{name}-bitnet-seed0-{code_hash(*FACTORY_CODE)}"
    if (folder / "config.json").is_file():
        return folder
    for stale in (cache / "models").glob(f"{name}-bitnet-seed0-*"):  # older factory code
        shutil.rmtree(stale, ignore_errors=True)
    log(f"generating a random-weight BitNet {name} model in {folder} ...")
    arch, factory_shape = model_shapes()[name]
    return build_atomically(folder, lambda tmp: make_model(tmp, arch, bitnet=True, seed=0, shape=factory_shape))


def cached_export(model_dir: Path, variant: str, cache: Path, refresh: bool = False,
                  log: Callable[[str], None] = progress) -> Path:
    """The folder of ``variant`` built from ``model_dir``: from the cache, or built into it."""
    model_hash = folder_hash(model_dir)
    folder = cache / "exports" / f"{model_hash}-{code_hash(*EXPORT_CODE)}-{variant}"
    if folder.is_dir() and not refresh:  # entries only appear complete (build_atomically)
        return folder
    # older exporter code: a hash of hex digits exactly, or "-*-int8" would also match "...-ort-int8"
    for stale in (cache / "exports").glob(f"{model_hash}-{'[0-9a-f]' * CODE_HASH_DIGITS}-{variant}"):
        shutil.rmtree(stale, ignore_errors=True)
    log(f"exporting {model_dir} as {variant} ...")
    return build_atomically(folder, lambda tmp: build_variant(model_dir, tmp, variant))


def build_atomically(folder: Path, build: Callable[[Path], object]) -> Path:
    """Runs ``build(tmp)`` (which creates ``tmp``) and renames tmp to ``folder``; nothing is left on failure."""
    with atomic_folder(folder, overwrite=True, what="cache entry") as tmp:
        tmp.rmdir()  # builders create their output folder themselves
        build(tmp)
    return folder
