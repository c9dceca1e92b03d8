"""Bad inputs to ``bitnet-onnx export``: one-line error naming the culprit, exit 1, nothing left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

from bitnet_onnx.cli import main


def edit_tensors(folder, edit):
    file = folder / "model.safetensors"
    tensors = safetensors.numpy.load_file(str(file))
    edit(tensors)
    safetensors.numpy.save_file(tensors, str(file))


def edit_config(folder, **changes):
    file = folder / "config.json"
    config = json.loads(file.read_text())
    config.update(changes)
    file.write_text(json.dumps(config))


def export_fails(capsys, tmp_path, model, *args, match):
    out = tmp_path / "out"
    rc = main(["export", str(model), "-o", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1, err
    assert err.startswith("bitnet-onnx export: error:") and match in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp folder left
    return err


def test_missing_tensor(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    edit_tensors(model, lambda t: t.pop("layers.1.mlp.up_proj.weight"))
    export_fails(capsys, tmp_path, model, match="layers.1.mlp.up_proj.weight")


def test_missing_bitnet_norm(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    edit_tensors(model, lambda t: t.pop("layers.0.self_attn.k_proj.norm.weight"))
    export_fails(capsys, tmp_path, model, match="layers.0.self_attn.k_proj.norm.weight")


def test_tensor_shape_contradicts_config(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")

    def shrink(t):
        t["layers.0.self_attn.q_proj.weight"] = np.zeros((128, 128), np.float32)

    edit_tensors(model, shrink)
    export_fails(capsys, tmp_path, model, match="layers.0.self_attn.q_proj.weight")


def test_non_finite_tensor(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")

    def poison(t):
        t["layers.0.mlp.down_proj.weight"][3, 4] = np.nan

    edit_tensors(model, poison)
    export_fails(capsys, tmp_path, model, match="layers.0.mlp.down_proj.weight")


def test_unknown_architecture(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    edit_config(model, model_type="llama")
    export_fails(capsys, tmp_path, model, match="llama")


def test_arch_mismatch(capsys, tmp_path, qwen3_bitnet):
    export_fails(capsys, tmp_path, qwen3_bitnet, "--arch", "gemma3", match="--arch gemma3")


@pytest.mark.parametrize("weights", ["i2s", "nbits"])
def test_ternary_variant_of_standard_model_needs_ternarize(capsys, tmp_path, qwen3_standard, weights):
    export_fails(capsys, tmp_path, qwen3_standard, "--weights", weights, match="--ternarize")


def test_ternarize_of_bitnet_model(capsys, tmp_path, qwen3_bitnet):
    export_fails(capsys, tmp_path, qwen3_bitnet, "--ternarize", match="already BitNet")


def test_missing_tokenizer(capsys, tmp_path, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    (model / "tokenizer.json").unlink()
    export_fails(capsys, tmp_path, model, match="tokenizer.json")


@pytest.mark.parametrize("weights", ["i2s", "nbits"])
def test_width_not_a_multiple_of_128(capsys, tmp_path, tiny_model, weights):
    model = tiny_model("qwen3", shape={"hidden_size": 96})
    export_fails(capsys, tmp_path, model, "--weights", weights, match="layers.0.self_attn.q_proj.weight")
    assert main(["export", str(model), "-o", str(tmp_path / "int8"), "--weights", "int8"]) == 0


def test_missing_model_folder(capsys, tmp_path):
    export_fails(capsys, tmp_path, tmp_path / "nope", match="nope")


def test_standard_model_defaults_to_f32(capsys, tmp_path, qwen3_standard):
    out = tmp_path / "out"
    assert main(["export", str(qwen3_standard), "-o", str(out)]) == 0
    assert json.loads((out / "bitnet_onnx.json").read_text())["weights"] == "f32"
    assert capsys.readouterr().out.strip() == str(out)


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "bitnet-onnx export" in capsys.readouterr().out


def test_sentence_transformers_module_the_graph_cannot_build(capsys, tmp_path, qwen3_bitnet, private_copy):
    """Once silently dropped: the export would have differed from sentence-transformers with no error."""
    model = private_copy(qwen3_bitnet, "model")
    modules = json.loads((model / "modules.json").read_text())
    extra = {"idx": len(modules), "name": "x", "path": "9_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}
    (model / "modules.json").write_text(json.dumps([*modules, extra]))
    export_fails(capsys, tmp_path, model, match="('sentence_transformers.models.LayerNorm', path '9_LayerNorm') "
                                                "is not a module the exported graph can build")
