"""The dependency rule (docs/architecture.md) holds: import-linter's contracts from pyproject.toml.

The contracts are kept in pyproject.toml only; these tests run them on the package, check that no
module escapes them, and show on a synthetic tree that they do catch a core module importing a
target and one target importing another.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import bitnet_onnx

ROOT = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _layer_modules(layer: str) -> list[str]:
    return [m.strip() for m in layer.replace("|", ":").split(":")]


def _lint(config: Path, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([LINT, "--config", str(config), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_the_package_keeps_its_contracts():
    run = _lint(ROOT / "pyproject.toml", ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_every_module_is_in_a_layer():
    listed = {m for c in _config()["contracts"] for layer in c.get("layers", []) for m in _layer_modules(layer)}
    package = Path(bitnet_onnx.__file__).parent
    present = {f"bitnet_onnx.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    present |= {f"bitnet_onnx.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert present - listed == set(), "add these modules to a layer in pyproject.toml [tool.importlinter]"
    assert listed - present == set(), "these layer entries name no module"


def _synthetic_tree(tmp_path: Path, bad_import: tuple[str, str] | None) -> tuple[Path, Path]:
    """A package 'layered' with one empty module per layer entry, the same contracts, and optionally
    ``importer`` importing ``imported``."""
    cfg = _config()
    modules = {m.replace("bitnet_onnx", "layered", 1) for c in cfg["contracts"] for layer in c["layers"]
               for m in _layer_modules(layer)}
    pkg = tmp_path / "src" / "layered"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for mod in modules:
        (pkg / f"{mod.split('.', 1)[1]}.py").write_text("")
    if bad_import:
        importer, imported = bad_import
        (pkg / f"{importer}.py").write_text(f"import layered.{imported}\n")
    contracts = []
    for c in cfg["contracts"]:
        layers = ", ".join('"' + layer.replace("bitnet_onnx", "layered") + '"' for layer in c["layers"])
        contracts.append(f'[[tool.importlinter.contracts]]\nid = "{c["id"]}"\nname = "{c["name"]}"\n'
                         f'type = "{c["type"]}"\nlayers = [{layers}]\n')
    config = tmp_path / "lint.toml"
    config.write_text('[tool.importlinter]\nroot_package = "layered"\n\n' + "\n".join(contracts))
    return config, tmp_path / "src"


@pytest.mark.parametrize("importer, imported", [("arch", "export"), ("export", "runtime"), ("convert_gguf", "export"),
                                                ("manifest", "commands")])
def test_the_contracts_catch_a_wrong_import(tmp_path, importer, imported):
    config, src = _synthetic_tree(tmp_path, (importer, imported))
    run = _lint(config, tmp_path, pythonpath=src)
    assert run.returncode != 0 and "BROKEN" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"layered.{importer} is not allowed to import layered.{imported}" in run.stdout


def test_the_synthetic_tree_passes_without_the_wrong_import(tmp_path):
    config, src = _synthetic_tree(tmp_path, ("commands", "export"))  # downward: allowed
    run = _lint(config, tmp_path, pythonpath=src)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
