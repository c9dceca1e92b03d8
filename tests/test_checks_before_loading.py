"""Argument checks that need no tensor data run before any is read (export --pooling).

Proved without timing: on the real Gemma3-270M GGUF (262k vocabulary, no pooling_type) gguf-py's reader
is never constructed before the error; on a HF folder a corrupt weights file still gives the argument error.
"""

from __future__ import annotations


import gguf
import pytest

from bitnet_onnx.cli import main
from bitnet_onnx.testing.real_tokenizers import gemma3_gguf

POOLING_ERROR = "no default pooling; pass --pooling"


def test_gguf_pooling_is_checked_before_the_reader(monkeypatch, tmp_path, capsys):
    def never(*args, **kwargs):
        raise AssertionError("gguf.GGUFReader was opened before the --pooling check")

    monkeypatch.setattr(gguf, "GGUFReader", never)
    assert main(["export", str(gemma3_gguf()), "-o", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "gemma3.pooling_type" in err and POOLING_ERROR in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_folder_pooling_is_checked_before_the_weights(tmp_path, capsys, tiny_model, private_copy):
    """A Gemma3 folder without sentence-transformers files and with a corrupt model.safetensors."""
    folder = private_copy(tiny_model("gemma3", bitnet=False), "gemma3")
    (folder / "modules.json").unlink()
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    assert main(["export", str(folder), "-o", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert POOLING_ERROR in err and "safetensors" not in err and "Traceback" not in err
    # with the argument given, the corrupt file is what is reported
    assert main(["export", str(folder), "-o", str(tmp_path / "out"), "--pooling", "mean"]) != 0
    assert "model.safetensors" in capsys.readouterr().err
