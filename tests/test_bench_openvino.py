"""`bench`'s openvino peer (bench/runners.py's "openvino" runner) on tiny f32 exports: its embeddings
against onnxruntime's, the precision it reports, the bench table with it beside ORT, and the bench
without openvino installed (no timing is asserted)."""

import json
import os
import sys

import numpy as np
import onnx
import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.bench.runners import RUNNERS
from bitnet_onnx.bench.worker import Worker
from bitnet_onnx.cli import main
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest

# OpenVINO's default on a CPU with AMX or AVX512-BF16 is bf16 (8 mantissa bits: each rounding is good to
# ~0.4%); on the tiny models the embeddings stay within cos 0.99995 of onnxruntime's f32. f32 elsewhere
# differs only in the order of float sums.
MIN_COSINE = {"bf16": 0.9995, "f16": 0.9995, "f32": 0.99999}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_openvino_runs_the_f32_export_like_onnxruntime(tiny_model, tiny_export, arch):
    """The runner's job embeds what the onnx runner's does (same token ids), at the precision it reports,
    which is the compiled model's own INFERENCE_PRECISION_HINT at the bench's thread count."""
    import openvino

    folder = tiny_export(tiny_model(arch), weights="f32", attention_name="onnx")  # what the openvino variant builds
    loaded = RUNNERS["openvino"].loader()(folder, 1, None)
    core = openvino.Core()
    compiled = core.compile_model(core.read_model(str(folder / "model.onnx")), "CPU", {"INFERENCE_NUM_THREADS": 1})
    precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert loaded.facts == {"inference_precision": precision, "openvino": openvino.get_version()}
    reference = RUNNERS["onnx"].loader()(folder, 1, None).job(3, 40)()[0]
    embeddings = loaded.job(3, 40)()
    assert embeddings.shape == reference.shape == (3, Manifest.read(folder).dimension)
    assert _cosines(embeddings, reference).min() >= MIN_COSINE[precision]


def test_openvino_refuses_an_export_that_needs_the_op_library(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("qwen3"), weights="i2s")
    with pytest.raises(BitnetOnnxError, match="needs the bitnet_onnx op library, which OpenVINO cannot run"):
        Worker("openvino", folder, threads=1, runner="openvino")


def test_openvino_cannot_read_group_query_attention_so_its_variant_keeps_the_stock_one(tiny_model, tiny_export):
    """Why the openvino variant exports --attention onnx: the default f32 export of a long-context causal
    model takes ONNX Runtime's GroupQueryAttention (--attention ort), which OpenVINO 2026.4 does not convert
    without past_key/past_value inputs; its report reaches the bench as one line."""
    folder = tiny_export(tiny_model("qwen3"), weights="f32", attention_name="ort")
    with pytest.raises(BitnetOnnxError, match="OpenVINO cannot compile it: .*GroupQueryAttention") as caught:
        Worker("openvino", folder, threads=1, runner="openvino")
    assert "\n" not in str(caught.value)


def test_openvino_refuses_a_thread_count_it_would_not_run(tiny_model, tiny_export):
    """OpenVINO 2026.4 caps INFERENCE_NUM_THREADS at the CPU's cores: more would be a row at another thread
    count than ORT's beside it, so the worker refuses to load."""
    folder = tiny_export(tiny_model("qwen3"), weights="f32", attention_name="onnx")
    asked = 4 * (os.cpu_count() or 1)
    with pytest.raises(BitnetOnnxError, match=rf"OpenVINO runs \d+ threads, not the {asked} asked for"):
        Worker("openvino", folder, threads=asked, runner="openvino")


def test_bench_runs_openvino_beside_onnxruntime(tiny_model, tmp_path, capsys):
    """One interleaved run: openvino's rows named with its precision, its header line, its export the f32
    one with the stock attention; not profiled (no ONNX Runtime session), the others are."""
    report = tmp_path / "bench.json"
    argv = ["bench", str(tiny_model("qwen3")), "--cells", "1x8,2x16", "--variants", "i2s,f32,openvino", "--reps", "1",
            "--cache-dir", str(tmp_path / "cache"), "--json", str(report), "--profile"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    result = json.loads(report.read_text())
    facts = result["variants"]["openvino"]
    precision = facts["inference_precision"]
    assert facts["attention"] == "onnx" and facts["op_library"] is False
    graph = onnx.load(f"{facts['folder']}/model.onnx", load_external_data=False).graph
    assert {n.op_type for n in graph.node} >= {"MatMul", "Softmax"}  # the f32 weights, the stock attention
    rows = {(r["variant"], r["batch"], r["seq"]): r for r in result["rows"]}
    assert set(rows) == {(v, b, s) for v in ("i2s", "f32", "openvino") for b, s in ((1, 8), (2, 16))}
    assert all(r["ms_per_batch"] > 0 and r["x_f32"] > 0 for r in rows.values())
    assert f"OpenVINO {facts['openvino']} at its default inference precision on this CPU" in out
    assert out.count(f"openvino ({precision})") == 2  # one row per cell
    assert result["profile"]["not_profiled"] == ["openvino"]
    assert {r["variant"] for r in result["profile"]["rows"]} == {"i2s", "f32"}


def test_bench_without_openvino_says_so_and_goes_on(tiny_model, tmp_path, capsys, monkeypatch):
    """Not installed: the default variants run without it, one progress line and one table line say why;
    asked for by name, it is a one-line error before anything is exported."""
    monkeypatch.setitem(sys.modules, "openvino", None)  # importlib.util.find_spec: not installed
    model, cache, report = tiny_model("qwen3"), tmp_path / "cache", tmp_path / "bench.json"
    assert main(["bench", str(model), "--cells", "1x8", "--reps", "1", "--cache-dir", str(cache),
                 "--json", str(report)]) == 0
    out, err = capsys.readouterr()
    why = "openvino is not installed (pip install 'bitnet-onnx[openvino]')"
    assert [line for line in err.splitlines() if "openvino" in line] == [
        f"bench: openvino unavailable ({why}); going on without it"]
    assert out.splitlines()[-1] == f"openvino: unavailable, {why}"
    result = json.loads(report.read_text())
    assert result["unavailable"] == {"openvino": why}
    assert {r["variant"] for r in result["rows"]} == {"i2s", "int8", "ort-int8", "nbits", "f32"}

    assert main(["bench", str(model), "--cells", "1x8", "--variants", "i2s,openvino",
                 "--cache-dir", str(tmp_path / "other-cache")]) == 1
    out, err = capsys.readouterr()
    assert err.strip() == f"bitnet-onnx bench: error: --variants openvino: {why}" and out == ""
    assert not (tmp_path / "other-cache" / "exports").exists()
