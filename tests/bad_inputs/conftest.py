"""The corpus' shared inputs, built once per session (read-only: each case works on copies), and the
pre-imported server its runs fork from."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cases import CASES
from fork_server import ForkServer

from bitnet_onnx.cli import VERBS


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory):
    """The session's fork server (fork_server.py), stopped with the runs it still has when the session
    ends. It imports the modules of the verbs the corpus runs (cli.VERBS); its imports go on while the
    session builds the corpus' inputs: request it first."""
    verbs = sorted({VERBS[case.argv[0]][0] for case in CASES if case.argv and case.argv[0] in VERBS})
    server = ForkServer(tmp_path_factory.mktemp("fork-server"), {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, verbs)
    yield server
    server.close()


@pytest.fixture(scope="session")
def corpus_sources(tiny_model, tiny_export, tmp_path_factory) -> dict[str, Path]:
    """Placeholder -> shared folder or file (tests/bad_inputs/cases.py names them)."""
    import onnx

    from bitnet_onnx.convert_gguf.writer import convert

    model = tiny_model("qwen3")
    export = tiny_export(model, "f32")
    root = tmp_path_factory.mktemp("corpus-sources")
    external = Path(shutil.copytree(export, root / "external"))
    onnx.save_model(onnx.load(str(export / "model.onnx")), str(external / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    gguf = convert(model, root / "model.gguf", "f16", pre_tokenizer="qwen2")
    return {"model": model, "gemma": tiny_model("gemma3"), "export": export, "external": external, "gguf": Path(gguf)}
