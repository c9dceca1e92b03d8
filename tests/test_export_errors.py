"""Bad inputs to ``bitnet-onnx export``: one-line error naming the culprit, exit 1, nothing left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest
import onnx
import safetensors.numpy

from bitnet_onnx.cli import main
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export import writer


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


def _with_a_dangling_node(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` plus a node reading a tensor nothing makes: onnx.checker refuses the graph."""
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    broken.graph.node.append(onnx.helper.make_node("Relu", ["no_such_tensor"], ["dangling_output"]))
    return broken


def test_a_graph_onnx_checker_refuses_is_one_line_naming_the_file(tmp_path):
    """writer.check_model on a saved file the checker really refuses: a BitnetOnnxError of one line
    naming the file and the checker's first line, not its multi-line report."""
    path = writer.save_model(_with_a_dangling_node(onnx.helper.make_model(onnx.helper.make_graph(
        [], "empty", [], []))), tmp_path)
    with pytest.raises(BitnetOnnxError) as refused:
        writer.check_model(path, uses_custom_op=False)
    message = str(refused.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: the written graph fails onnx.checker: ") and "no_such_tensor" in message
    assert isinstance(refused.value.__cause__, onnx.checker.ValidationError)


def test_export_of_a_graph_onnx_checker_refuses(capsys, tmp_path, qwen3_bitnet, monkeypatch):
    """The export verb when its graph fails onnx.checker (a bug of ours, made here by adding a dangling
    node before the save): one line naming model.onnx, exit 1, no folder left."""
    save = writer.save_model
    monkeypatch.setattr(writer, "save_model", lambda model, *args: save(_with_a_dangling_node(model), *args))
    err = export_fails(capsys, tmp_path, qwen3_bitnet, match="the written graph fails onnx.checker: ")
    assert "/model.onnx: the written graph" in err and "no_such_tensor" in err, err
