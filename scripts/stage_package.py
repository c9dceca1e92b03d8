#!/usr/bin/env python3
"""Lays out the bitnet_onnx package's Python files as the wheel installs them, from the checkout.

The package's parts live in one top-level folder per layer (bitnet_onnx/; export/, runtime/, convert_gguf/;
cli/'s folders) that the build maps onto one import root (pyproject.toml's ``[tool.scikit-build.wheel.packages]``).
A tool that reads the package as one folder (import-linter, an import-graph drawer, atheris' instrumented
imports) reads this copy instead: DEST/bitnet_onnx/... with every mapped folder in its place.

    python scripts/stage_package.py DEST

The layer test (tests/test_layers.py), the recipe test and the fuzz harness (tests/fuzz/common.py) use it.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_mapping(root: Path = ROOT) -> dict[str, Path]:
    """Installed package folder (``bitnet_onnx/export``) -> its source folder, as the wheel maps them."""
    with open(root / "pyproject.toml", "rb") as f:
        packages = tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]
    return {target: root / source for target, source in packages.items()}


def stage_package(dest: Path, root: Path = ROOT) -> Path:
    """Copies the package's Python files to ``dest`` as a wheel lays them out; returns ``dest``."""
    dest = Path(dest)
    for target, source in sorted(package_mapping(root).items(), key=lambda item: item[0].count("/")):
        for module in source.rglob("*.py"):
            if "__pycache__" in module.parts:
                continue
            copy = dest / target / module.relative_to(source)
            if copy.exists():
                continue  # a deeper mapping's folder, copied from its own source
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(module.read_bytes())
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/stage_package.py DEST", file=sys.stderr)
        return 2
    print(stage_package(Path(argv[0])) / "bitnet_onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
