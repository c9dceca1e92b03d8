"""The CLI-verb recipe (docs/contributing.md, "Add a CLI verb") kept true: every verb of cli.VERBS
has its module with add_arguments and run, its argparse code stays in the command layer, and the
README shows it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bitnet_onnx.cli import VERBS
from test_layers import stage_package  # scripts/stage_package.py

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_has_its_module_and_a_readme_example(verb):
    module = importlib.import_module(VERBS[verb][0])
    assert callable(getattr(module, "add_arguments", None)) and callable(getattr(module, "run", None)), verb
    assert re.search(rf"bitnet-onnx {re.escape(verb)}\b", (ROOT / "README.md").read_text(encoding="utf-8")), \
        f"README shows no `bitnet-onnx {verb}`"


def test_argparse_lives_in_the_command_layer_only(tmp_path):
    package = stage_package(tmp_path / "site") / "bitnet_onnx"
    command_layer = {package / "__main__.py", *(package / "cli").rglob("*.py"), *(package / "commands").rglob("*.py")}
    users = [str(p.relative_to(package)) for p in package.rglob("*.py")
             if p not in command_layer and re.search(r"^\s*(import argparse|from argparse)", p.read_text(), re.M)]
    assert users == [], f"argparse outside bitnet_onnx.commands and bitnet_onnx.cli: {users}"
