"""Exports with ``--attention fused`` (one EncoderAttention node per layer, the i2s default) against
``--attention onnx`` (the stock decomposition) and the torch reference, on tiny generated models:
both archs, both padding sides, Gemma3's sliding and bidirectional layers, sequences longer than a
key tile (64) and than the window."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.customops.encoder_attention import NAME as FUSED_OP
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.reference import Reference


def run(folder, ids, mask):
    sess = ort.InferenceSession(str(folder / "model.onnx"), customops.session_options(threads=2),
                                providers=["CPUExecutionProvider"])
    return sess.run(["sentence_embedding", "token_embeddings"], {"input_ids": ids, "attention_mask": mask})


def cosines(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def batch(lengths, seq, side, seed=0, vocab=500):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), seq), np.int64)
    mask = np.zeros((len(lengths), seq), np.int64)
    for r, n in enumerate(lengths):
        cols = slice(seq - n, seq) if side == "left" else slice(0, n)
        ids[r, cols], mask[r, cols] = rng.integers(3, vocab, n), 1
    return ids, mask


def op_types(folder) -> set[str]:
    return {n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node}


MODELS = {
    "qwen3": dict(arch="qwen3"),
    "gemma3": dict(arch="gemma3"),  # window 8, layers sliding, sliding, full
    "gemma3-bidirectional": dict(arch="gemma3", bidirectional=True),
}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("side", ["left", "right"])
def test_fused_equals_onnx_and_matches_the_reference(tiny_model, tiny_export, model, side):
    folder = tiny_model(**MODELS[model])
    fused = tiny_export(folder)  # i2s, whose default is fused
    stock = tiny_export(folder, "i2s", attention_name="onnx")
    assert Manifest.read(fused).weights == "i2s" and Manifest.read(fused).attention == "fused"
    assert Manifest.read(stock).attention == "onnx"
    assert FUSED_OP in op_types(fused) and not {"Softmax", "Transpose"} & op_types(fused)
    assert FUSED_OP not in op_types(stock)

    ids, mask = batch([100, 71, 9, 1], 100, side)  # > one key tile, > the window, a 1-token text
    sent, tokens = run(fused, ids, mask)
    stock_sent, stock_tokens = run(stock, ids, mask)
    assert cosines(sent, stock_sent).min() >= 0.999999
    real = mask.astype(bool)
    token_cos = cosines(tokens[real], stock_tokens[real])
    # per-token int8 quantization turns a last-bit difference into a rounding flip now and then
    assert np.median(token_cos) >= 0.999999 and token_cos.min() >= 0.9995
    ref_sent, _ = Reference(folder).encode(ids, mask)
    assert cosines(sent, ref_sent).min() >= 0.9999  # as the stock i2s export (test_export)


def test_fused_with_float_weights_matches_transformers(tiny_model, tiny_export):
    """The strategy is independent of the weight variant: f32 weights + fused vs HF in float."""
    folder = tiny_model("gemma3", bitnet=False)
    out = tiny_export(folder, "f32", attention_name="fused")
    ids, mask = batch([40, 23], 40, "left")
    sent, _ = run(out, ids, mask)
    ref, _ = Reference(folder).encode(ids, mask)
    assert cosines(sent, ref).min() >= 0.99999


def test_attention_precision_option(tiny_model, tiny_export, tmp_path, capsys):
    """--attention-precision bf16 writes precision="bf16" on every EncoderAttention node and stays close to
    the f32 export (float weights: no int8 rounding to amplify it); with --attention onnx it is refused,
    naming both options, before anything is written."""
    from bitnet_onnx.cli import main

    folder = tiny_model("gemma3", bitnet=False)
    f32 = tiny_export(folder, "f32", attention_name="fused", attention_precision="f32")
    bf16 = tiny_export(folder, "f32", attention_name="fused", attention_precision="bf16")
    nodes = [n for n in onnx.load(str(bf16 / "model.onnx")).graph.node if n.op_type == FUSED_OP]
    assert nodes and all({a.name: a.s for a in n.attribute}.get("precision") == b"bf16" for n in nodes)
    ids, mask = batch([40, 23], 40, "left")
    assert cosines(run(bf16, ids, mask)[0], run(f32, ids, mask)[0]).min() >= 0.9999
    out = tmp_path / "out"
    code = main(["export", str(folder), "-o", str(out), "--weights", "f32", "--attention", "onnx",
                 "--attention-precision", "bf16"])
    err = capsys.readouterr().err
    assert code != 0 and "--attention-precision bf16 needs --attention fused" in err, err
    assert not out.exists()


def _precisions(folder) -> list:
    """Each EncoderAttention node's precision attribute (None: absent, which is f32)."""
    nodes = [n for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node
             if n.op_type == FUSED_OP]
    assert nodes
    return [{a.name: a.s.decode() for a in n.attribute if a.name == "precision"}.get("precision") for n in nodes]


def test_fused_default_precision_is_auto_and_runs_what_the_library_picks(tiny_model, tiny_export, monkeypatch):
    """--attention fused without --attention-precision writes precision="auto" on every node and "auto" in
    the manifest; explicit f32 writes no attribute (the graph older libraries read); the stock attention
    records f32. Run with BITNET_ONNX_ATTENTION_PRECISION forced, the auto export gives the bytes of the
    explicit export of that precision, and unforced those of the one the library names for this host."""
    folder = tiny_model("gemma3", bitnet=False)
    auto = tiny_export(folder, "f32", attention_name="fused")
    explicit = {p: tiny_export(folder, "f32", attention_name="fused", attention_precision=p) for p in ("f32", "bf16")}
    assert set(_precisions(auto)) == {"auto"} and Manifest.read(auto).attention_precision == "auto"
    assert set(_precisions(explicit["f32"])) == {None} and Manifest.read(explicit["f32"]).attention_precision == "f32"
    assert set(_precisions(explicit["bf16"])) == {"bf16"}
    assert Manifest.read(tiny_export(folder, "f32", attention_name="onnx")).attention_precision == "f32"
    ids, mask = batch([40, 23], 40, "left")
    want = {p: run(explicit[p], ids, mask)[0].tobytes() for p in ("f32", "bf16")}
    assert want["f32"] != want["bf16"]
    for forced in ("f32", "bf16"):
        monkeypatch.setenv(customops.ATTENTION_PRECISION_ENV, forced)
        assert run(auto, ids, mask)[0].tobytes() == want[forced], forced
    monkeypatch.delenv(customops.ATTENTION_PRECISION_ENV)
    assert run(auto, ids, mask)[0].tobytes() == want[customops.attention_auto_precision()]


def test_attention_precision_choices_and_refusals(tiny_model, tmp_path, capsys):
    """--attention-precision takes f32, bf16 and auto (the fused default, as --help says); anything else
    is refused in one line before anything is written; auto with the stock attention is refused as bf16 is."""
    from bitnet_onnx.cli import main
    from bitnet_onnx.export.attention import DEFAULT_PRECISION, choose_precision

    assert DEFAULT_PRECISION == "auto" and choose_precision(None, "fused") == "auto"
    assert [choose_precision(p, "fused") for p in ("f32", "bf16", "auto")] == ["f32", "bf16", "auto"]
    assert choose_precision(None, "onnx") == choose_precision("f32", "ort") == "f32"
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--attention-precision {f32,bf16,auto}" in help_text and "(default auto with --attention fused" in help_text
    folder = tiny_model("gemma3", bitnet=False)
    with pytest.raises(SystemExit) as exit_code:  # argparse's refusal of a value outside the choices
        main(["export", str(folder), "-o", str(tmp_path / "fp8"), "--attention-precision", "fp8"])
    assert exit_code.value.code != 0 and "invalid choice: 'fp8'" in capsys.readouterr().err
    out = tmp_path / "auto"
    code = main(["export", str(folder), "-o", str(out), "--weights", "f32", "--attention", "onnx",
                 "--attention-precision", "auto"])
    assert code != 0 and "--attention-precision auto needs --attention fused" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "fp8").exists()
