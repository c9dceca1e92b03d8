"""include_prompt: false (the prompt's tokens left out of the mean) and --pooling for folders without
sentence-transformers files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bitnet_onnx import cli
from bitnet_onnx.manifest import PROMPT_LENGTH_INPUT, Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.tokenization import TextTokenizer

PROMPT = "task: search result | query: "
TEXTS = ["a short one", "The quick brown fox jumps over the lazy dog.", "x", "Où est la bibliothèque ?"]


def _without_prompt_model(folder):
    config_file = folder / "1_Pooling" / "config.json"
    config = json.loads(config_file.read_text())
    config["include_prompt"] = False
    config_file.write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def gemma_models(tiny_model, tmp_path_factory):
    """(include_prompt true, include_prompt false) copies of one tiny mean-pooling Gemma3, right and left padded."""
    root = tmp_path_factory.mktemp("include-prompt")
    out = {}
    for side in ("right", "left"):
        base = tiny_model("gemma3", padding_side=side)
        out[side] = (base, _without_prompt_model(shutil.copytree(base, root / f"gemma3-{side}")))
    return out


def _st_mean_without_prompt(model_dir, tokenizer, texts, prompt):
    """sentence-transformers' Pooling(include_prompt=False) on HF transformers' token embeddings:
    prompt_length = tokens of the prompt alone - 1; mask[:, :prompt_length] = 0; mean; Normalize."""
    import torch

    from bitnet_onnx.reference import Reference

    ref = Reference(model_dir)
    prompt_length = len(tokenizer.encode_plain(prompt)) - 1
    out = []
    for text in texts:  # one text per batch: no padding, so positions are the row's own tokens
        ids, mask = tokenizer.encode([prompt + text])
        tokens = torch.from_numpy(ref.encode(ids, mask)[1])
        m = torch.from_numpy(mask).clone()
        m[:, :prompt_length] = 0
        m = m.unsqueeze(-1).float()
        pooled = (tokens * m).sum(1) / m.sum(1).clamp(min=1e-9)
        out.append(torch.nn.functional.normalize(pooled, p=2, dim=1)[0].numpy())
    return np.stack(out)


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_graph_takes_prompt_length_only_when_asked(gemma_models, tiny_export):
    import onnx

    with_prompt, without_prompt = gemma_models["right"]
    names = lambda out: [i.name for i in onnx.load(out / "model.onnx", load_external_data=False).graph.input]  # noqa: E731
    assert names(tiny_export(with_prompt)) == ["input_ids", "attention_mask"]
    assert names(tiny_export(without_prompt)) == ["input_ids", "attention_mask", PROMPT_LENGTH_INPUT]


@pytest.mark.parametrize("side", ["right", "left"])
def test_prompt_left_out_of_the_mean_as_sentence_transformers(gemma_models, tiny_export, side):
    pytest.importorskip("torch")
    with_prompt, without_prompt = gemma_models[side]
    embedder = Embedder(tiny_export(without_prompt))
    assert embedder.pools_without_prompt and Manifest.read(embedder.folder).padding_side == side
    got = embedder.encode(TEXTS, prompt=PROMPT, batch_size=4)  # one padded batch
    want = _st_mean_without_prompt(without_prompt, TextTokenizer.from_folder(embedder.folder), TEXTS, PROMPT)
    for text, g, w in zip(TEXTS, got, want):
        assert _cos(g, w) > 0.999, (side, text)
    # The prompt's tokens are really left out: with them in the mean the embedding moves.
    included = Embedder(tiny_export(with_prompt)).encode(TEXTS, prompt=PROMPT, batch_size=4)
    assert max(_cos(a, b) for a, b in zip(got, included)) < 0.99
    # Without a prompt nothing is left out: the same numbers as the include_prompt=true export.
    np.testing.assert_allclose(embedder.encode(TEXTS), Embedder(tiny_export(with_prompt)).encode(TEXTS),
                               rtol=0, atol=1e-6)


def test_prompt_length_counts_like_sentence_transformers(gemma_models, tiny_export):
    embedder = Embedder(tiny_export(gemma_models["right"][1]))
    assert embedder.prompt_length("") == 0
    # Gemma: <bos> + the prompt's tokens; minus one = the prompt's own tokens
    assert embedder.prompt_length(PROMPT) == len(TextTokenizer.from_folder(embedder.folder).encode_plain(PROMPT)) - 1
    assert Embedder(tiny_export(gemma_models["right"][0])).prompt_length(PROMPT) == 0  # include_prompt: true


# --- --pooling for folders without sentence-transformers files -----------------------------------

def _strip_st_files(folder):
    for name in ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json"):
        (folder / name).unlink()
    for sub in folder.glob("[0-9]_*"):
        shutil.rmtree(sub)
    return folder


def test_gemma3_without_st_files_needs_pooling(tmp_path, tiny_model, private_copy, capsys):
    folder = _strip_st_files(private_copy(tiny_model("gemma3")))
    assert cli.main(["export", str(folder), "-o", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no sentence-transformers Pooling module" in err
    assert "--pooling mean|cls|lasttoken" in err and not (tmp_path / "none").exists()
    for pooling in ("mean", "lasttoken", "cls"):
        out = tmp_path / pooling
        assert cli.main(["export", str(folder), "-o", str(out), "--pooling", pooling]) == 0
        manifest = Manifest.read(out)
        assert manifest.pooling == pooling and not manifest.normalize


def test_qwen3_without_st_files_takes_pooling(tmp_path, tiny_model, private_copy, caplog):
    folder = _strip_st_files(private_copy(tiny_model("qwen3")))
    assert cli.main(["export", str(folder), "-o", str(tmp_path / "cls"), "--pooling", "cls"]) == 0
    assert Manifest.read(tmp_path / "cls").pooling == "cls"
    # without --pooling: Qwen3's last-token rule, said out loud
    assert cli.main(["export", str(folder), "-o", str(tmp_path / "default")]) == 0
    assert Manifest.read(tmp_path / "default").pooling == "lasttoken"
    assert "--pooling" in caplog.text


def test_pooling_that_contradicts_the_pooling_module(tmp_path, tiny_model, capsys):
    assert cli.main(["export", str(tiny_model("gemma3")), "-o", str(tmp_path / "o"), "--pooling", "cls"]) == 1
    assert "contradicts its 1_Pooling module (mean)" in capsys.readouterr().err
