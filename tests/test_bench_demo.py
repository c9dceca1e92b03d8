"""`bench` and `demo` code paths on small models (one repetition; no timing is asserted)."""

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from bitnet_onnx.arch import ARCHITECTURES, REAL_SHAPES
from bitnet_onnx.bench import cache as bench_cache
from bitnet_onnx.cli import main
from bitnet_onnx.commands import bench as bench_command
from bitnet_onnx.customops import attention_auto_precision, dispatch, selected_isa
from bitnet_onnx.manifest import Manifest


def test_bench_table_json_and_cache(gemma3_bitnet, tmp_path, capsys, monkeypatch):
    cache, report = tmp_path / "cache", tmp_path / "bench.json"
    argv = ["bench", str(gemma3_bitnet), "--seq", "8,24", "--batch", "1,3", "--variants", "i2s,int8,f32",
            "--reps", "1", "--cache-dir", str(cache), "--json", str(report)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err.count("exporting") == 3
    lines = out.splitlines()
    result = json.loads(report.read_text())
    attention = {v: Manifest.read(Path(m["folder"])).attention for v, m in result["variants"].items()}
    assert {v: m["attention"] for v, m in result["variants"].items()} == attention
    assert lines[1].startswith("attention: ") and all(f"{a} (" in lines[1] for a in attention.values())
    kernels = {v: m.get("kernels") for v, m in result["variants"].items()}
    assert kernels["i2s"] == f"{selected_isa()}/measure" and kernels["f32"] is None  # f32: no op of ours
    assert lines[2].startswith("op kernels (ISA/family") and f"{kernels['i2s']} (i2s" in lines[2]
    # i2s's fused attention at the export default, auto: what the library resolves it to here (the suite: f32)
    assert result["variants"]["i2s"]["attention_precision"] == f"auto -> {attention_auto_precision()}"
    assert lines[3] == ("EncoderAttention precision (auto = the op library's choice on this host): "
                        f"auto -> {attention_auto_precision()} (i2s)")
    # what i2s's nodes measured per shape: a family or, where too few calls ran, "measuring"
    families = "|".join(f.name for f in dispatch().families)
    measured = result["variants"]["i2s"]["measured_families"]
    assert measured and all(re.search(rf": ({families}|measuring) \(", m) for m in measured), measured
    assert any(re.search(rf": ({families}) \(", m) for m in measured), measured
    assert lines[4] == "kernel families measured by i2s: " + "; ".join(measured)
    assert "measured_families" not in result["variants"]["int8"]
    assert lines[5].split()[:5] == ["batch", "seq", "variant", "ms/batch", "tokens/s"]
    assert len(lines) == 7 + 4 * 3  # title, attention, kernels, precision, measured, header, rule, a row per cell

    rows = result["rows"]
    assert {(r["batch"], r["seq"], r["variant"]) for r in rows} == {
        (b, s, v) for b in (1, 3) for s in (8, 24) for v in ("i2s", "int8", "f32")}
    for r in rows:
        assert r["ms_per_batch"] > 0 and len(r["ms_all"]) == 1
        assert r["tokens_per_s"] == pytest.approx(r["batch"] * r["seq"] / r["ms_per_batch"] * 1000)
        if r["variant"] == "f32":
            assert r["x_f32"] == 1.0 and r["x_int8"] > 0
    for v, mem in result["variants"].items():
        assert mem["peak_rss_bytes"] >= mem["load_rss_bytes"] >= mem["base_rss_bytes"] > 0
        assert mem["file_bytes"] > 0
    sizes = {v: m["file_bytes"] for v, m in result["variants"].items()}
    assert sizes["i2s"] < sizes["int8"] < sizes["f32"]

    # same model, same code: every export comes from the cache
    monkeypatch.setattr(bench_cache, "build_variant", lambda *a: pytest.fail("re-exported a cached variant"))
    assert main(argv[:-2]) == 0
    assert "exporting" not in capsys.readouterr().err
    # a changed model folder is a new cache entry
    changed = tmp_path / "changed"
    shutil.copytree(gemma3_bitnet, changed)
    config = json.loads((changed / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    (changed / "config.json").write_text(json.dumps(config))
    assert bench_cache.folder_hash(changed) != bench_cache.folder_hash(gemma3_bitnet)


def test_bench_shape_generates_once(tmp_path, capsys):
    argv = ["bench", "--shape", "qwen3-tiny", "--seq", "8", "--batch", "1", "--variants", "i2s,nbits2",
            "--reps", "1", "--cache-dir", str(tmp_path)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "generating" in err and "qwen3-tiny" in out and " nbits2 " in out
    assert main(argv) == 0
    assert "generating" not in capsys.readouterr().err
    assert len(list((tmp_path / "models").iterdir())) == 1


@pytest.mark.parametrize("argv, message", [
    (["--seq", "16,abc"], "--seq"),
    (["--variants", "i2s,fp8"], "--variants"),
    (["--batch", "0"], "--batch"),
    ([], "either MODEL_DIR or --shape"),
    (["--shape", "qwen3-tiny", "--json", "/nonexistent/folder/b.json"], "--json"),
    (["--shape", "qwen3-tiny", "--cells", "1x16,8"], "--cells '1x16,8'"),
    (["--shape", "qwen3-tiny", "--cells", "0x16"], "--cells '0x16'"),
    (["--shape", "qwen3-tiny", "--cells", "1x16", "--seq", "16"], "--cells: give either --cells or --seq/--batch"),
    (["--shape", "qwen3-tiny", "--memory-budget", "0"], "--memory-budget must be > 0"),
])
def test_bench_bad_arguments(tmp_path, capsys, argv, message):
    assert main(["bench", *argv, "--cache-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "models").exists()  # refused before generating anything


def test_bench_cells_default_to_document_lengths_and_follow_seq_and_batch():
    """No cell options: one-query latency to 8192-token documents at batch 1, and a batch of 16 passages;
    --seq / --batch: their grid, the one not given at its default."""
    parser = argparse.ArgumentParser()
    bench_command.add_arguments(parser)

    def cells(*argv):
        return bench_command._cells(parser.parse_args(["--shape", "qwen3-tiny", *argv]))

    assert cells() == [(1, 16), (1, 128), (1, 512), (16, 128), (1, 2048), (1, 8192)]
    assert cells("--cells", "1x2048,1X8192,1x2048") == [(1, 2048), (1, 8192)]
    assert cells("--seq", "16,128") == [(1, 16), (1, 128), (16, 16), (16, 128)]
    assert cells("--batch", "4") == [(4, 16), (4, 128), (4, 512)]


def test_demo_runs_end_to_end(tmp_path, capsys):
    work = tmp_path / "demo"
    assert main(["demo", "--workdir", str(work), "--skip-bench"]) == 0
    out = capsys.readouterr().out
    for arch in ARCHITECTURES:
        assert f"== {arch}:" in out
    assert out.count("cosine similarity of the sample texts") == len(ARCHITECTURES)
    verify = [line for line in out.splitlines() if line.startswith("verify against PyTorch")]
    assert len(verify) == len(ARCHITECTURES)
    if "skipped" not in verify[0]:
        worst = [float(line.rsplit("worst ", 1)[1]) for line in verify]
        assert min(worst) > 0.999
    # the kept exports work with the embed verb
    assert main(["embed", str(work / "qwen3-i2s"), "hello", "world"]) == 0
    vectors = np.array(json.loads(capsys.readouterr().out))
    assert vectors.shape == (2, REAL_SHAPES["qwen3"].config["hidden_size"])
    assert main(["demo", "--workdir", str(work)]) == 1  # not empty: refuses to mix runs
    assert "not empty" in capsys.readouterr().err


def test_bench_ort_int8_baseline_is_quantize_dynamic(gemma3_bitnet, tmp_path, capsys):
    """ort-int8 = onnxruntime.quantization.quantize_dynamic of the f32 export, with its own ratio column."""
    report = tmp_path / "bench.json"
    argv = ["bench", str(gemma3_bitnet), "--seq", "8", "--batch", "2", "--variants", "i2s,ort-int8",
            "--reps", "1", "--cache-dir", str(tmp_path / "cache"), "--json", str(report)]
    assert main(argv) == 0
    assert "x ort-int8" in capsys.readouterr().out
    result = json.loads(report.read_text())
    folder = Path(result["variants"]["ort-int8"]["folder"])
    ops = {n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops and "I2STernaryMatMul" not in ops
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["ort-int8"]["x_ort-int8"] == 1.0 and rows["i2s"]["x_ort-int8"] > 0
