"""The dependency rule (docs/architecture.md) holds: import-linter's contracts from pyproject.toml.

The contracts are kept in pyproject.toml only; these tests run them on the package, check that no
module escapes them, and show on a synthetic tree that they do catch a core module importing a
target, one target importing another, and a circle between two modules (of one line or two): the
layers are ordered one line per sub-layer with independent modules inside a line, so the next
circle fails the suite instead of hiding in a group.

The package's parts live in one top-level folder per layer (bitnet_onnx/; export/, runtime/,
convert_gguf/; cli/'s folders) that the build maps onto one import root. import-linter walks one folder per
package, so the contracts run on the package as a wheel installs it: a staged copy laid out by the
build's own mapping (``[tool.scikit-build.wheel.packages]``; scripts/stage_package.py), imported without
the editable finder.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import bitnet_onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from stage_package import package_mapping, stage_package  # noqa: E402  (the one layout of the package as installed)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _config() -> dict:
    return _pyproject()["tool"]["importlinter"]


# lint-imports in a Python without the editable install's finder, so that PYTHONPATH decides where
# the package is (the editable finder would show the source folders' parents to import-linter).
_LINT_WITHOUT_EDITABLE_FINDER = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith('_editable_')]; "
    "from importlinter.cli import lint_imports_command; sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())"
)


def _layer_modules(layer: str) -> list[str]:
    return [m.strip() for m in layer.replace("|", ":").split(":")]


def _lint(config: Path, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LINT_WITHOUT_EDITABLE_FINDER, str(config), "--no-cache"],
                          cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(pythonpath)},
                          timeout=300)


def test_the_package_keeps_its_contracts(tmp_path):
    staged = stage_package(tmp_path / "site")
    run = _lint(ROOT / "pyproject.toml", tmp_path, pythonpath=staged)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
    analyzed = sum(1 for _ in (staged / "bitnet_onnx").rglob("*.py"))
    assert f"Analyzed {analyzed} files" in run.stdout, "import-linter did not read the staged package whole"


def test_lint_imports_passes_as_a_user_runs_it():
    """``lint-imports`` in the checkout, through the editable install. That install also lists the
    repository root as a place of ``bitnet_onnx`` (the mapped folders' parent), so a Python file in
    a root folder named like a subpackage (customops/) would be read as part of it."""
    run = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "0 broken" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_the_staged_package_is_the_installed_one(tmp_path):
    """Each staged module is the very file the installed package imports under that name."""
    staged = stage_package(tmp_path / "site")
    sources = {target.replace("/", "."): source for target, source in package_mapping().items()}
    for path in staged.rglob("*.py"):
        name = ".".join(path.relative_to(staged).with_suffix("").parts).removesuffix(".__init__")
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, f"{name} is staged but not importable"
        assert Path(spec.origin).read_bytes() == path.read_bytes(), f"{name}: staged copy differs from {spec.origin}"
    for package, source in sources.items():
        assert Path(importlib.util.find_spec(package).origin).parent == source, f"{package} is not read from {source}"


def test_the_staging_script_runs_as_a_command(tmp_path):
    """``python scripts/stage_package.py DEST``: the one layout, for tools outside the tests too."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_package.py"), str(tmp_path / "site")],
                         capture_output=True, text=True, timeout=120)
    package = tmp_path / "site" / "bitnet_onnx"
    assert run.returncode == 0 and run.stdout.strip() == str(package), run.stderr
    for target, source in package_mapping().items():
        assert sorted(p.name for p in (tmp_path / "site" / target).glob("*.py")) == sorted(
            p.name for p in source.glob("*.py")), target


def _contract_modules(contract_id: str) -> set[str]:
    (contract,) = [c for c in _config()["contracts"] if c["id"] == contract_id]
    return {m for layer in contract["layers"] for m in _layer_modules(layer)}


def _modules_in(folder: Path, prefix: str) -> set[str]:
    """The modules and subpackages directly in ``folder``, named ``prefix.<name>``."""
    present = {f"{prefix}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    return present | {f"{prefix}.{p.parent.name}" for p in folder.glob("*/__init__.py")}


# Contracts inside one subpackage: its modules, each in a layer of the contract (id -> subpackage)
SUBPACKAGE_CONTRACTS = {"bench": "bench"}


def test_every_module_is_in_a_layer(tmp_path):
    package = stage_package(tmp_path / "site") / "bitnet_onnx"
    checks = {"layers": _modules_in(package, "bitnet_onnx")}
    checks |= {cid: _modules_in(package / sub, f"bitnet_onnx.{sub}") for cid, sub in SUBPACKAGE_CONTRACTS.items()}
    for contract_id, present in checks.items():
        listed = _contract_modules(contract_id)
        assert present - listed == set(), f"add these modules to a layer of the {contract_id!r} contract in pyproject.toml"
        assert listed - present == set(), f"these entries of the {contract_id!r} contract name no module"


# A command-layer module that stays in bitnet_onnx/: ``python -m bitnet_onnx`` runs the package root's
# __main__ (a line that calls bitnet_onnx.cli). The facade, __init__, is no module of a layer.
PACKAGE_DOORS = {"bitnet_onnx.__main__"}


def test_each_top_level_folder_holds_one_layer():
    """cli/ holds the command layer (the contract's lines above the targets), export/, runtime/ and
    convert_gguf/ the targets, bitnet_onnx/ the layers below them: a reader of the checkout sees the
    layers as folders."""
    (contract,) = [c for c in _config()["contracts"] if c["id"] == "layers"]
    lines = [set(_layer_modules(layer)) for layer in contract["layers"]]
    (targets_at,) = [i for i, line in enumerate(lines) if "bitnet_onnx.export" in line]
    expected = {"cli": set().union(*lines[:targets_at]) - PACKAGE_DOORS, "targets": lines[targets_at],
                "bitnet_onnx": set().union(*lines[targets_at + 1:]) | PACKAGE_DOORS}
    found = {"cli": set(), "targets": set(), "bitnet_onnx": _modules_in(ROOT / "bitnet_onnx", "bitnet_onnx")}
    for target, source in package_mapping().items():
        if target != "bitnet_onnx":  # a subpackage from a folder of cli/, or a target's own top-level folder
            found["cli" if source.parent == ROOT / "cli" else "targets"].add(target.replace("/", "."))
    assert found == expected
    assert sorted(p.name for p in (ROOT / "cli").iterdir() if p.name != "__pycache__") == sorted(
        source.name for source in package_mapping().values() if source.parent == ROOT / "cli"), \
        "cli/ holds only folders the build maps into the package"


def _module_path(pkg: Path, module: str, modules: set[str]) -> Path:
    """Where ``module`` (layered.x.y) lives in the synthetic tree: a package's __init__ when another
    contract names modules inside it (layered.bench of the layers contract, layered.bench.worker of
    the bench one), else a file."""
    parts = module.split(".")[1:]
    if any(m.startswith(module + ".") for m in modules):
        folder = pkg.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / "__init__.py"
    pkg.joinpath(*parts[:-1]).mkdir(parents=True, exist_ok=True)
    return pkg.joinpath(*parts[:-1], parts[-1] + ".py")


def _contract_entries(contract: dict) -> list[str]:
    """The modules a contract names: its layers' (a layers contract) or its sources and forbidden ones."""
    if contract["type"] == "layers":
        return [m for layer in contract["layers"] for m in _layer_modules(layer)]
    return [*contract["source_modules"], *contract["forbidden_modules"]]


def _quoted_in_layered(entry: str) -> str:
    return '"' + entry.replace("bitnet_onnx", "layered") + '"'


def _synthetic_tree(tmp_path: Path, *imports: tuple[str, str]) -> tuple[Path, Path]:
    """A package 'layered' with one empty module per layer entry, the same contracts, and each
    ``(importer, imported)`` of ``imports`` as an import statement."""
    cfg = _config()
    modules = {m.replace("bitnet_onnx", "layered", 1) for c in cfg["contracts"] for m in _contract_entries(c)}
    pkg = tmp_path / "src" / "layered"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for mod in modules:
        _module_path(pkg, mod, modules).write_text("")
    for importer, imported in imports:
        with open(_module_path(pkg, f"layered.{importer}", modules), "a", encoding="utf-8") as module:
            module.write(f"import layered.{imported}\n")
    contracts = []
    for c in cfg["contracts"]:
        lists = "".join(f"{key} = [{', '.join(_quoted_in_layered(m) for m in c[key])}]\n"
                        for key in ("layers", "source_modules", "forbidden_modules") if key in c)
        contracts.append(f'[[tool.importlinter.contracts]]\nid = "{c["id"]}"\nname = "{c["name"]}"\n'
                         f'type = "{c["type"]}"\n{lists}')
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


@pytest.mark.parametrize("importer, imported", [("runtime", "reference"), ("export", "testing")])
def test_the_targets_may_not_import_the_reference_or_the_test_models(tmp_path, importer, imported):
    """Allowed by the layers (one line down), forbidden by the contract of its own."""
    config, src = _synthetic_tree(tmp_path, (importer, imported))
    run = _lint(config, tmp_path, pythonpath=src)
    assert run.returncode != 0 and "BROKEN" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"layered.{importer} -> layered.{imported}" in run.stdout, run.stdout[-2000:]


# weights <-> gguf_source: the circle the model sources once had (two lines); st_modules <-> formats:
# two modules of one line, which a ":" group would have let import each other both ways.
@pytest.mark.parametrize("first, second", [("weights", "gguf_source"), ("st_modules", "formats"),
                                           ("model_source", "st_modules")])
def test_the_contracts_catch_a_circle(tmp_path, first, second):
    config, src = _synthetic_tree(tmp_path, (first, second), (second, first))
    run = _lint(config, tmp_path, pythonpath=src)
    assert run.returncode != 0 and "BROKEN" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert (f"layered.{first} is not allowed to import layered.{second}" in run.stdout
            or f"layered.{second} is not allowed to import layered.{first}" in run.stdout), run.stdout[-2000:]


def test_every_layer_line_is_ordered_or_independent():
    """A ":" group lets its modules import each other both ways: a circle inside it is invisible."""
    grouped = [layer for c in _config()["contracts"] for layer in c.get("layers", []) if ":" in layer]
    assert grouped == [], "split these lines into ordered lines, or make their modules independent ('|')"


def _core_modules() -> list[str]:
    """The modules of the layers below the targets' line (what the targets build on)."""
    layers = next(c["layers"] for c in _config()["contracts"] if c["id"] == "layers")
    targets = next(i for i, layer in enumerate(layers) if "bitnet_onnx.export" in _layer_modules(layer))
    return [m for layer in layers[targets + 1:] for m in _layer_modules(layer)]


def _function_level_package_imports(source: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                names = [inner.module or ""] if isinstance(inner, ast.ImportFrom) else (
                    [a.name for a in inner.names] if isinstance(inner, ast.Import) else [])
                found += [f"{source.name}:{inner.lineno} {n}" for n in names if n.split(".")[0] == "bitnet_onnx"]
    return found


def test_core_modules_import_each_other_at_the_top(tmp_path):
    """No lazy import between core modules: an import inside a function once hid a circle from Python."""
    package = stage_package(tmp_path / "site") / "bitnet_onnx"
    lazy = []
    for module in _core_modules():
        path = package / module.split(".", 1)[1]
        for source in (sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]):
            lazy += _function_level_package_imports(source)
    assert lazy == [], "move these imports to the module's top (a circle they hide fails the layer test)"


def test_the_synthetic_tree_passes_without_the_wrong_import(tmp_path):
    config, src = _synthetic_tree(tmp_path, ("commands", "export"), ("weights", "gguf_source"))  # downward
    run = _lint(config, tmp_path, pythonpath=src)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_no_module_imports_the_facade(tmp_path):
    """The package root is the users' facade (docs/architecture.md): modules import what it re-exports
    from where it lives (``bitnet_onnx.version``, ``bitnet_onnx.runtime.embedder``), never from the root."""
    package = stage_package(tmp_path / "site") / "bitnet_onnx"
    facade = set(bitnet_onnx.__all__)
    found = []
    for source in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "bitnet_onnx" and node.level == 0:
                where = f"{source.relative_to(package)}:{node.lineno}"
                found += [f"{where} {a.name}" for a in node.names if a.name in facade]
    assert found == [], "import these names from their own modules"
