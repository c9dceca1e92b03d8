"""Loading is quiet: creating a session of an export writes nothing on stderr at ORT's default log
level, for the token-ids model and the strings-in model of every architecture and every
``export --weights`` variant, whether a host builds the session (plain onnxruntime, the libraries the
manifest names) or ``Embedder`` does.

ORT writes its warnings from C++ straight to file descriptor 2, so the sessions are made in a
subprocess whose stderr is read whole; a control model (an initializer also listed among the graph's
inputs, what the strings-in graph's prompt once was) shows that this capture does see ORT's warnings.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.commands import export as export_command

MARK = "@@session "
# Run in the subprocess: argv[1] is a JSON list of [label, folder or ONNX file, kind]; before each
# session a line argv[2] + label goes to stderr, so what ORT writes lands under the session that wrote it.
LOADER = r"""
import json, sys
from pathlib import Path

import onnxruntime as ort

from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.session import manifest_session_options

def host_session(folder, text):
    m = Manifest.read(folder)
    path = folder / (m.text_model_file if text else m.model_file)
    options = manifest_session_options(m, text=text)  # the libraries the manifest names, nothing else set
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

for label, where, kind in json.loads(sys.argv[1]):
    sys.stderr.write(sys.argv[2] + label + "\n")
    sys.stderr.flush()
    if kind == "file":
        ort.InferenceSession(where, providers=["CPUExecutionProvider"])
    elif kind == "embedder":
        Embedder(where, threads=1)
    else:
        host_session(Path(where), kind == "text")
    sys.stderr.flush()
"""


def _choices(option: str) -> list[str]:
    """The choices of an ``export`` option, as the CLI offers them."""
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    return list(next(a.choices for a in parser._actions if option in a.option_strings))


WEIGHTS = _choices("--weights")


def _stderr_by_session(sessions: list[tuple[str, str, str]]) -> dict[str, str]:
    """Creates each (label, where, kind) session in one fresh interpreter: label -> what it wrote on fd 2."""
    res = subprocess.run([sys.executable, "-c", LOADER, json.dumps(sessions), MARK], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    written: dict[str, str] = {}
    label = None
    for line in res.stderr.splitlines(keepends=True):
        if line.startswith(MARK):
            label = line[len(MARK):].rstrip("\n")
            written[label] = ""
        else:
            assert label is not None, f"written before any session: {line!r}"
            written[label] += line
    assert sorted(written) == sorted(s[0] for s in sessions), res.stderr[-3000:]
    return written


def _control_model(path) -> str:
    """A model with an initializer that is also a graph input: ORT warns about it on load."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])], "control",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.zeros(1, dtype=np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save_model(model, str(path))
    return str(path)


def test_weights_choices_are_the_variants():
    assert {"i2s", "int8", "nbits", "f32", "f16"} <= set(WEIGHTS)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_creating_sessions_writes_nothing_on_stderr(tiny_model, tiny_export, tmp_path, arch):
    sessions = [("control", _control_model(tmp_path / "control.onnx"), "file")]
    for weights in WEIGHTS:
        folder = str(tiny_export(tiny_model(arch), weights=weights, text_input=True))
        sessions += [(f"{weights} {kind}", folder, kind) for kind in ("ids", "text", "embedder")]
    written = _stderr_by_session(sessions)
    assert "appears in graph inputs" in written.pop("control")  # the capture sees ORT's warnings
    assert {label: text for label, text in written.items() if text} == {}


def test_a_users_log_severity_is_kept(tiny_model, tiny_export):
    """Quiet is ORT's default level, not an override: a user who turns ORT's logger to verbose
    (set_default_logger_severity(0)) sees Embedder's sessions log, as any session of theirs would."""
    folder = str(tiny_export(tiny_model("qwen3"), weights="i2s"))
    script = ("import sys, onnxruntime as ort\nfrom bitnet_onnx.runtime.embedder import Embedder\n"
              "ort.set_default_logger_severity(0)\nsys.stderr.write('@@loading\\n'); sys.stderr.flush()\n"
              "Embedder(sys.argv[1], threads=1)\n")
    res = subprocess.run([sys.executable, "-c", script, folder], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    logged = res.stderr.split("@@loading\n", 1)[1]
    # "[I:onnxruntime:<logid>, ...": the session's own logger (its logid is the session's, not the
    # environment's "Default"), silenced when create_session set log_severity_level itself
    assert re.search(r"\[[VI]:onnxruntime:(?!Default,)", logged), logged[-2000:]
