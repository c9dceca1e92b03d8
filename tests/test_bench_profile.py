"""`bench --profile`: ORT's trace parsed into per-op-type shares (bench/profile.py), the profiling session
(bench/runners.py), the profile table, and the verb on a tiny model (no timing is asserted)."""

import json
import tempfile
from pathlib import Path

import pytest

from bitnet_onnx.bench import measure, profile, report, runners
from bitnet_onnx.cli import main
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import size_text
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.session import create_session


def _node(ts, dur, op, shapes=None, suffix="_kernel_time"):
    args = {"op_name": op, "provider": "CPUExecutionProvider"}
    if shapes is not None:
        args["input_type_shape"] = [{"float": s} for s in shapes]
    return {"cat": "Node", "name": f"/n{ts}{suffix}", "ts": ts, "dur": dur, "ph": "X", "args": args}


def _run(ts, dur):
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "ph": "X", "args": {}}


TRACE = [
    {"cat": "Session", "name": "model_loading_uri", "ts": 0, "dur": 50, "ph": "X", "args": {}},
    _run(100, 100),
    _node(105, 40, "I2STernaryMatMul"),
    _node(145, 0, "I2STernaryMatMul", suffix="_fence_after"),  # older ORT's markers: not kernel time
    _node(150, 20, "MatMul", shapes=[[1, 16, 64]]),  # weight not listed: a projection
    _node(171, 10, "MatMul", shapes=[[1, 2, 16, 8], [1, 2, 8, 16]]),  # two activations: attention
    _node(182, 10, "Reshape"),
    {"cat": "Node", "name": "no_args", "ts": 190, "dur": 5, "ph": "X"},  # no op_name: skipped
    _run(300, 200),
    _node(310, 120, "I2STernaryMatMul"),
    _node(440, 30, "Reshape"),
    _node(600, 7, "Reshape"),  # outside every run
]


def test_run_summaries_assign_kernels_to_runs_and_split_matmuls():
    first, second = profile.run_summaries(TRACE[::-1])  # in any order: runs are sorted by start
    assert first == {"run_us": 100, "node_us": 80,
                     "ops_us": {"I2STernaryMatMul": 40, "MatMul": 20, "MatMul (attention)": 10, "Reshape": 10}}
    assert second == {"run_us": 200, "node_us": 150, "ops_us": {"I2STernaryMatMul": 120, "Reshape": 30}}
    assert {k: profile.group_of(k) for k in first["ops_us"]} == {
        "I2STernaryMatMul": "projections", "MatMul": "projections", "MatMul (attention)": "attention", "Reshape": "other"}
    assert profile.group_of("EncoderAttention") == "attention" and profile.group_of("Softmax") == "attention"
    assert {profile.group_of(op) for op in ("DynamicQuantizeMatMul", "MatMulNBits", "MatMulIntegerToFloat")} == {
        "projections"}


def test_cell_shares_are_medians_summing_to_100():
    runs = [{"run_us": 100, "node_us": 80, "ops_us": {"I2STernaryMatMul": 60, "EncoderAttention": 10, "Add": 10}},
            {"run_us": 900, "node_us": 880,
             "ops_us": {"I2STernaryMatMul": 60, "EncoderAttention": 810, "Add": 10}},  # slowed by another job
            {"run_us": 110, "node_us": 88, "ops_us": {"I2STernaryMatMul": 70, "EncoderAttention": 8, "Add": 10}}]
    row = profile.cell_shares(runs)  # the slow run moves no median
    assert row["ops_pct"] == pytest.approx({"I2STernaryMatMul": 75, "EncoderAttention": 12.5, "Add": 12.5})
    assert list(row["ops_pct"]) == ["I2STernaryMatMul", "Add", "EncoderAttention"]  # largest first, then by name
    assert row["groups_pct"] == pytest.approx({"projections": 75, "attention": 12.5, "other": 12.5})
    assert row["overhead_pct"] == pytest.approx(20) and row["runs"] == 3
    assert row["run_ms"] == pytest.approx(0.11) and row["node_ms"] == pytest.approx(0.088)


def test_trace_errors_name_the_file(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text("[{")
    with pytest.raises(BitnetOnnxError, match="trace.json: not a readable ONNX Runtime profile"):
        profile.read_trace(bad)
    bad.write_text("{}")
    with pytest.raises(BitnetOnnxError, match="trace.json: not an ONNX Runtime profile"):
        profile.read_trace(bad)
    with pytest.raises(BitnetOnnxError, match=r"t.json: run 2 of 2 has no node events"):
        profile.run_summaries([_run(0, 10), _node(1, 5, "Add"), _run(20, 10)], where="t.json")


def test_profile_table_aligns_and_sums_the_rest():
    ops = {"I2STernaryMatMul": 80.0, "EncoderAttention": 10.0, **{f"Op{i}": 1.25 for i in range(8)}}
    rows = [{"variant": "i2s", "batch": 1, "seq": 16, "runs": 3, "run_ms": 1.0, "node_ms": 0.9, "overhead_pct": 10.0,
             "groups_pct": {"projections": 80.0, "attention": 10.0, "other": 10.0}, "ops_pct": ops}]
    result = {"profile": {"reps": 3, "rows": rows, "not_profiled": ["llama.cpp-f16"]}}
    lines = report.format_profile_table(result).splitlines()
    assert lines[0].startswith("op-type shares, ONNX Runtime profiler: 3 profiled runs per cell")
    assert lines[2] == "not profiled (not an ONNX Runtime session): llama.cpp-f16"
    assert lines[3].split("  ")[-1] == "op types (% of node time)"
    assert lines[5].split()[:8] == ["1", "16", "i2s", "80.0", "10.0", "10.0", "10.0", "I2STernaryMatMul"]
    assert lines[5].endswith("I2STernaryMatMul 80.0, EncoderAttention 10.0, Op0 1.2, Op1 1.2, Op2 1.2, Op3 1.2, "
                             "4 others 5.0")
    assert len(lines[3].split("op types")[0]) == len(lines[5].split("I2STernaryMatMul 80.0")[0])


@pytest.mark.parametrize("weights", ["i2s", "f32"])
def test_a_profiled_session_differs_from_the_timed_one_only_by_the_profiler(tiny_model, tiny_export, tmp_path, weights):
    folder = tiny_export(tiny_model("qwen3"), weights=weights)
    manifest = Manifest.read(folder)
    timed = create_session(folder, manifest, threads=1)
    profiled = create_session(folder, manifest, threads=1, profile_prefix=str(tmp_path / "p"))
    settings = ("intra_op_num_threads", "inter_op_num_threads", "log_severity_level", "graph_optimization_level",
                "execution_mode", "enable_cpu_mem_arena", "enable_mem_pattern", "use_deterministic_compute")
    for name in settings:
        assert getattr(profiled.get_session_options(), name) == getattr(timed.get_session_options(), name), name
    assert profiled.get_session_options().enable_profiling and not timed.get_session_options().enable_profiling
    assert profiled.get_providers() == timed.get_providers()
    trace = Path(profiled.end_profiling())
    assert trace.parent == tmp_path and trace.name.startswith("p")
    trace.unlink()


def test_bench_profile_shares_are_real_and_leave_no_files(tiny_model, tmp_path, capsys, monkeypatch):
    work, temp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)  # ORT's default trace location
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    cache, out = tmp_path / "cache", work / "bench.json"
    argv = ["bench", str(tiny_model("qwen3")), "--seq", "8,24", "--batch", "1", "--variants", "i2s,ort-int8,f32",
            "--reps", "2", "--cache-dir", str(cache), "--json", str(out), "--profile"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    result = json.loads(out.read_text())
    rows = {(r["variant"], r["seq"]): r for r in result["profile"]["rows"]}
    assert set(rows) == {(v, s) for v in ("i2s", "ort-int8", "f32") for s in (8, 24)}
    assert result["profile"]["not_profiled"] == [] and result["profile"]["reps"] == 2
    for (variant, seq), r in rows.items():
        assert sum(r["groups_pct"].values()) == pytest.approx(100, abs=1)
        assert sum(r["ops_pct"].values()) == pytest.approx(100, abs=1)
        assert 0 <= r["overhead_pct"] < 100 and r["runs"] == 2 and r["run_ms"] >= r["node_ms"] > 0
        assert r["groups_pct"]["projections"] > 0 and r["groups_pct"]["attention"] > 0
    i2s = rows[("i2s", 8)]
    assert i2s["ops_pct"]["I2STernaryMatMul"] == pytest.approx(i2s["groups_pct"]["projections"])
    assert rows[("i2s", 24)]["ops_pct"]["EncoderAttention"] > 0
    assert "I2STernaryMatMul" not in rows[("f32", 8)]["ops_pct"] and rows[("f32", 8)]["ops_pct"]["MatMul"] > 0
    assert any(op in rows[("ort-int8", 8)]["ops_pct"] for op in ("DynamicQuantizeMatMul", "MatMulInteger"))
    # the profile table follows the timed one, one row per cell
    table = stdout.split("op-type shares, ONNX Runtime profiler")[1].splitlines()
    assert len([line for line in table if line.split()[:1] == ["1"]]) == 6
    # ORT's trace files: in no folder the run touched, and the temporary folder is gone
    assert sorted(p.name for p in work.iterdir()) == ["bench.json"]
    assert list(temp.iterdir()) == []
    assert not [p for p in tmp_path.rglob("*") if "profile" in p.name and p.suffix == ".json"]


def test_runs_beyond_the_memory_budget_are_reported_not_run_in_both_tables(tiny_model, tiny_export, tmp_path, capsys):
    """A budget that holds i2s's long run but not the stock attention's beside it: f32's long cell is not
    run, timed or profiled, and says what it would need; every other cell runs."""
    model, long = tiny_model("qwen3"), 256
    exports = {w: Manifest.read(tiny_export(model, weights=w)) for w in ("i2s", "f32")}  # what the bench builds
    assert exports["f32"].attention == "onnx" and exports["f32"].attention_bytes_per_token_pair > 0
    need = {w: m.batch_bytes(1, long) for w, m in exports.items()}
    budget = need["i2s"] + need["f32"] // 2
    out = tmp_path / "bench.json"
    argv = ["bench", str(model), "--cells", f"1x8,1x{long}", "--variants", "i2s,f32", "--reps", "1",
            "--memory-budget", repr(budget / 2**30), "--cache-dir", str(tmp_path / "cache"), "--json", str(out),
            "--profile"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert abs(result["memory_budget_bytes"] - budget) <= 1
    why = (f"cannot hold it: needs up to {size_text(need['f32'])} of activations (the stock attention's "
           f"[batch, heads, S, S] scores) by the export's cost model")
    for rows in (result["rows"], result["profile"]["rows"]):
        by_cell = {(r["variant"], r["seq"]): r for r in rows}
        assert by_cell[("f32", long)]["not_run"].startswith(why)
        assert all("not_run" not in r for key, r in by_cell.items() if key != ("f32", long))
    timed = {(r["variant"], r["seq"]): r for r in result["rows"]}
    assert timed[("i2s", long)]["ms_per_batch"] > 0 and "x_f32" not in timed[("i2s", long)]
    assert timed[("i2s", 8)]["x_f32"] > 0
    profiled = {(r["variant"], r["seq"]): r for r in result["profile"]["rows"]}
    assert profiled[("i2s", long)]["ops_pct"]["EncoderAttention"] > 0 and profiled[("i2s", long)]["runs"] == 1
    assert stdout.count(f"f32  not run: {why}") == 2  # the timed table and the profile table


def test_profile_removes_its_temporary_folder_when_a_worker_fails(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        measure.profile({"i2s": empty}, [(1, 8)], threads=1, reps=1)
    assert list(temp.iterdir()) == []


def test_bench_help_documents_profile(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "--profile" in out and "overhead" in out and "I2STernaryMatMul" in out
    assert "1x2048,1x8192" in out and "--memory-budget" in out and "bitnet-onnx[openvino]" in out
