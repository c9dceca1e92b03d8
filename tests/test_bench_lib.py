"""bitnet_onnx.bench pieces on their own: interleaving order, rows and table, cache keys, variant table,
worker errors, host facts. The whole bench runs in test_bench_demo.py."""

import platform
import subprocess
import sys

import pytest

from bitnet_onnx import customops
from bitnet_onnx.bench import cache, host, report, timing, variants
from bitnet_onnx.bench.measure import refused_runs
from bitnet_onnx.bench.runners import RUNNERS, unavailable
from bitnet_onnx.bench.worker import Worker
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import NAMES as FORMAT_NAMES
from bitnet_onnx.testing import SHAPES


def test_interleave_rotates_after_every_measured_cell_and_discards_the_warm_up():
    calls = []

    def measure(name, cell):
        calls.append((name, cell))
        return len(calls)

    big, small = (16, 512), (1, 16)
    times = timing.interleave(["a", "b", "c"], [small, big], reps=2, measure=measure,
                              warm_up=lambda cell: cell == small)
    assert calls == [
        ("a", small), ("b", small), ("c", small),  # warm-up: small only, then one rotation
        ("b", small), ("c", small), ("a", small), ("c", big), ("a", big), ("b", big),  # repetition 1
        ("a", small), ("b", small), ("c", small), ("b", big), ("c", big), ("a", big),  # repetition 2
    ]
    assert times[("a", small)] == [6, 10] and times[("c", big)] == [7, 14]  # warm-up results dropped


def test_interleave_skips_what_include_refuses_and_rotates_as_without_it():
    calls = []
    times = timing.interleave(["a", "b", "c"], [1, 2], reps=1, measure=lambda n, c: calls.append((n, c)),
                              include=lambda name, cell: (name, cell) != ("a", 2))
    assert calls == [("a", 1), ("b", 1), ("c", 1), ("b", 2), ("c", 2)]  # cell 2's order starts at b either way
    assert times[("a", 2)] == [] and len(times[("b", 2)]) == 1


def test_runs_are_refused_when_the_workers_largest_runs_exceed_the_budget():
    """Each worker keeps its largest run's memory: runs are taken smallest first while the workers'
    largest runs fit together; the refused ones say what they would need."""
    gib = 2**30
    costs = {("i2s", (1, 16)): (gib // 4, False), ("i2s", (1, 8192)): (gib, False),
             ("f32", (1, 16)): (gib // 4, True), ("f32", (1, 8192)): (13 * gib, True),
             ("llama.cpp-f16", (1, 8192)): None}  # no cost model: always run
    assert refused_runs(costs, None) == {}
    assert refused_runs(costs, 14 * gib) == {}  # i2s's 1 GiB and f32's 13 GiB fit together
    refused = refused_runs(costs, 6 * gib)
    assert list(refused) == [("f32", (1, 8192))]
    assert refused[("f32", (1, 8192))] == (
        "cannot hold it: needs up to 13.0 GiB of activations (the stock attention's [batch, heads, S, S] scores) "
        "by the export's cost model, 5.0 GiB of the 6.0 GiB memory budget left")
    # i2s's largest run is the one left out when it is the larger: smallest first
    costs[("i2s", (1, 8192))] = (5 * gib, False)
    costs[("f32", (1, 8192))] = (2 * gib, True)
    refused = refused_runs(costs, 6 * gib)
    assert list(refused) == [("i2s", (1, 8192))]
    assert "needs up to 5.0 GiB of activations by the export's cost model" in refused[("i2s", (1, 8192))]


def test_interleave_without_warm_up_measures_reps_times():
    log = []
    times = timing.interleave(["x", "y"], [None], reps=3, measure=lambda n, c: n, log=log.append)
    assert times == {("x", None): ["x"] * 3, ("y", None): ["y"] * 3}
    assert log == ["bench: repetition 1/3 ...", "bench: repetition 2/3 ...", "bench: repetition 3/3 ..."]


def _result(times, names, configs, not_run=None):
    mem = {"file_bytes": 2 * 2**20, "base_rss_bytes": 1, "load_rss_bytes": 3 * 2**20, "peak_rss_bytes": 5 * 2**20}
    return {"threads": 1, "reps": 3, "onnxruntime": "1.0", "bitnet_onnx": "0", "cpu": "Some CPU",
            "variants": {v: {**mem, "folder": "."} for v in names},
            "rows": report.result_rows(times, names, configs, not_run), "model": "m"}


def test_rows_hold_medians_tokens_per_second_and_ratios_to_the_bases_that_ran():
    times = {("i2s", (2, 8)): [1.0, 3.0, 2.0], ("f32", (2, 8)): [4.0, 4.0, 9.0], ("ort-int8", (2, 8)): [8.0] * 3}
    rows = {r["variant"]: r for r in report.result_rows(times, ["i2s", "f32", "ort-int8"], [(2, 8)])}
    assert rows["i2s"]["ms_per_batch"] == 2.0 and rows["i2s"]["tokens_per_s"] == pytest.approx(8000)
    assert rows["i2s"]["ms_all"] == [1.0, 3.0, 2.0]
    assert rows["i2s"]["x_f32"] == 2.0 and rows["i2s"]["x_ort-int8"] == 4.0
    assert "x_int8" not in rows["i2s"]  # int8 did not run: no column
    assert rows["f32"]["x_f32"] == 1.0


def test_runs_not_run_keep_their_rows_with_the_reason_and_ratios_skip_them():
    configs, names = [(1, 16), (1, 8192)], ["i2s", "f32", "openvino"]
    not_run = {("f32", (1, 8192)): "cannot hold it: needs up to 13.0 GiB"}
    times = {(v, c): [] if (v, c) in not_run else [2.0 * (k + 1)] for k, v in enumerate(names) for c in configs}
    result = {**_result(times, names, configs, not_run), "memory_budget_bytes": 6 * 2**30,
              "unavailable": {"llama.cpp-f16": "llama-cpp-python is not installed"}}
    result["variants"]["openvino"].update(inference_precision="bf16", openvino="2026.4.1")
    rows = {(r["variant"], r["seq"]): r for r in result["rows"]}
    assert rows[("f32", 8192)] == {"variant": "f32", "batch": 1, "seq": 8192, "not_run": not_run[("f32", (1, 8192))]}
    assert rows[("i2s", 16)]["x_f32"] == 2.0 and "x_f32" not in rows[("i2s", 8192)]  # no base at 8192
    lines = report.format_table(result).splitlines()
    assert lines[1] == ("OpenVINO 2026.4.1 at its default inference precision on this CPU "
                        "(the compiled model's INFERENCE_PRECISION_HINT): bf16 (openvino)")
    assert lines[2].startswith("memory budget: 6.0 GiB for the runs' activations")
    widths = {len(line) for line in lines[3:6]}
    assert len(widths) == 1  # header, rule and measured rows align
    assert lines[5].split()[:3] == ["1", "16", "i2s"] and lines[5].split()[5] == "2.00"
    assert lines[7].split()[2:4] == ["openvino", "(bf16)"]  # named with the precision it ran at
    assert lines[8].split()[2] == "i2s" and lines[8].split()[5] == "-"  # the ratio to a base that did not run
    assert lines[9].split("  f32  ")[1] == "not run: cannot hold it: needs up to 13.0 GiB"
    assert lines[10].split()[2:4] == ["openvino", "(bf16)"] and len(lines) == 12
    assert lines[11] == "llama.cpp-f16: unavailable, llama-cpp-python is not installed"


def test_table_columns_follow_the_variant_table_and_align():
    names, configs = ["i2s", "ort-int8", "int8", "f32"], [(1, 16), (16, 512)]
    times = {(v, c): [0.05 * (k + 1) * (c[0] * c[1])] for k, v in enumerate(names) for c in configs}
    lines = report.format_table(_result(times, names, configs)).splitlines()
    assert lines[0] == ("model: m | threads 1 | median of 3 interleaved reps | onnxruntime 1.0 | Some CPU")
    assert [c.strip() for c in lines[1].split("  ") if c.strip()] == [
        "batch", "seq", "variant", "ms/batch", "tokens/s", "x f32", "x int8", "x ort-int8",
        "load RSS MB", "peak RSS MB", "file MB", "load/file"]
    assert len({len(line) for line in lines[1:]}) == 1  # every row as wide as the header
    assert lines[3].split() == ["1", "16", "i2s", "0.80", "20000", "4.00", "3.00", "2.00", "3", "5", "2", "1.50"]
    assert len(lines) == 3 + len(names) * len(configs)  # no attention facts: no attention line


def test_header_groups_the_attention_of_the_exports():
    configs = [(1, 16)]
    names = ["i2s", "int8", "f32", "nbits"]
    result = _result({(v, c): [1.0] for v in names for c in configs}, names, configs)
    for v, attention in zip(names, ["fused", "onnx", "onnx", "fused"]):
        result["variants"][v]["attention"] = attention
    assert report.header(result)[1] == "attention: fused (i2s, nbits), onnx (int8, f32)"


def test_header_names_the_op_kernels_each_variant_ran(qwen3_bitnet, tiny_export, monkeypatch):
    """The kernels line: ISA/family as each worker's environment selects them (the variant's forced
    family over the inherited environment), none for exports without our op library."""
    from bitnet_onnx.bench.measure import op_kernels
    from bitnet_onnx.customops import ISA_ENV, KERNEL_ENV

    ours, stock = (report.export_facts(tiny_export(qwen3_bitnet, w)) for w in ("i2s", "f32"))
    assert ours["op_library"] is True and stock["op_library"] is False
    monkeypatch.setenv(ISA_ENV, "scalar")
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    # the tiny i2s export's attention is fused at the default precision, auto: f32 on the scalar ISA
    assert ours["attention_precision"] == "auto" and stock["attention_precision"] is None
    assert op_kernels(ours, variants.VARIANTS["i2s"].env) == {"kernels": "scalar/measure",
                                                              "attention_precision": "auto -> f32"}
    assert op_kernels(ours, variants.variant("i2s-lut").env)["kernels"] == "scalar/lut"
    assert op_kernels(stock, ()) == {}
    assert op_kernels({"file_bytes": 1, "attention": "llama.cpp"}, ()) == {}  # llama.cpp's facts
    configs, names = [(1, 16)], ["i2s", "i2s-lut", "f32"]
    result = _result({(v, c): [1.0] for v in names for c in configs}, names, configs)
    result["variants"]["i2s"]["kernels"], result["variants"]["i2s-lut"]["kernels"] = "scalar/measure", "scalar/lut"
    assert report.header(result)[1] == ("op kernels (ISA/family, measure = timed on this host per shape): "
                                        "scalar/measure (i2s), scalar/lut (i2s-lut)")


def test_header_says_what_auto_attention_precision_runs(qwen3_bitnet, tiny_export, monkeypatch):
    """The precision line: an auto export's resolution as the library gives it for the worker's
    environment (BITNET_ONNX_ATTENTION_PRECISION of the variant over the inherited one), beside explicit ones."""
    from bitnet_onnx.bench.measure import op_kernels
    from bitnet_onnx.customops import ATTENTION_PRECISION_ENV, ISA_ENV, attention_auto_precision

    ours = report.export_facts(tiny_export(qwen3_bitnet, "i2s"))
    monkeypatch.delenv(ISA_ENV, raising=False)
    monkeypatch.delenv(ATTENTION_PRECISION_ENV, raising=False)
    here = attention_auto_precision()
    assert op_kernels(ours, ())["attention_precision"] == f"auto -> {here}"
    assert op_kernels(ours, ((ATTENTION_PRECISION_ENV, "bf16"),))["attention_precision"] == "auto -> bf16"
    configs, names = [(1, 16)], ["i2s", "nbits", "f32"]
    result = _result({(v, c): [1.0] for v in names for c in configs}, names, configs)
    result["variants"]["i2s"]["attention_precision"] = f"auto -> {here}"
    result["variants"]["nbits"]["attention_precision"] = "f32"
    assert report.header(result)[-1] == ("EncoderAttention precision (auto = the op library's choice on this host): "
                                         f"auto -> {here} (i2s), f32 (nbits)")


def test_model_shapes_come_from_the_factory():
    shapes = cache.model_shapes()
    assert shapes["qwen3-0.6b"] == ("qwen3", "qwen3-0.6b") and shapes["gemma3-tiny"] == ("gemma3", "tiny")
    assert sorted(shapes.values()) == sorted((arch, s) for arch in SHAPES for s in SHAPES[arch])
    assert list(shapes)[-1].endswith("-tiny") and not list(shapes)[0].endswith("-tiny")  # real shapes first


def test_folder_hash_covers_names_and_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "w.bin").write_bytes(b"\0" * 10)
    assert cache.folder_hash(a) == cache.folder_hash(b)  # the location does not count
    (b / "sub" / "w.bin").write_bytes(b"\0" * 9 + b"\1")
    assert cache.folder_hash(a) != cache.folder_hash(b)
    (b / "sub" / "w.bin").write_bytes(b"\0" * 10)
    (b / "sub" / "w.bin").rename(b / "sub" / "v.bin")
    assert cache.folder_hash(a) != cache.folder_hash(b)


def test_code_hash_follows_the_sources():
    assert cache.code_hash(*cache.EXPORT_CODE) == cache.code_hash(*cache.EXPORT_CODE)
    assert cache.code_hash("bitnet_onnx.export") != cache.code_hash("bitnet_onnx.bench.variants")


def test_cached_export_builds_once_and_replaces_entries_of_older_code(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    built = []

    def fake_build(model_dir, out, name):
        out.mkdir()
        (out / "model.onnx").write_text(name)
        built.append(name)
        return out

    monkeypatch.setattr(cache, "build_variant", fake_build)
    store, logged = tmp_path / "cache", []
    first = cache.cached_export(model, "i2s", store, log=logged.append)
    assert cache.cached_export(model, "i2s", store, log=logged.append) == first and built == ["i2s"]
    assert logged == [f"exporting {model} as i2s ..."]
    assert cache.cached_export(model, "i2s", store, refresh=True) == first and built == ["i2s", "i2s"]
    monkeypatch.setattr(cache, "code_hash", lambda *modules: "newer-exporter")
    second = cache.cached_export(model, "i2s", store)
    assert second != first and not first.exists() and (second / "model.onnx").read_text() == "i2s"
    assert sorted(p.name for p in (store / "exports").iterdir()) == [second.name]  # no temp folders left


def test_cached_export_keeps_variants_whose_name_ends_like_another(tmp_path, monkeypatch):
    """Building int8 (or f16) replaces older int8 entries only, not ort-int8's (or llama.cpp-f16's)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")

    def fake_build(model_dir, out, name):
        out.mkdir()
        return out

    monkeypatch.setattr(cache, "build_variant", fake_build)
    store = tmp_path / "cache"
    kept = [cache.cached_export(model, v, store) for v in ("ort-int8", "llama.cpp-f16")]
    cache.cached_export(model, "int8", store)
    cache.cached_export(model, "f16", store)
    assert all(folder.is_dir() for folder in kept)
    assert len(list((store / "exports").iterdir())) == 4


def test_build_atomically_leaves_nothing_when_the_build_fails(tmp_path):
    def failing(tmp):
        tmp.mkdir()
        (tmp / "half.bin").write_bytes(b"x")
        raise RuntimeError("exporter failed")

    with pytest.raises(RuntimeError):
        cache.build_atomically(tmp_path / "entry", failing)
    assert list(tmp_path.iterdir()) == []


def test_variant_table():
    assert set(FORMAT_NAMES) <= set(variants.VARIANTS)  # every exporter variant can be benched
    assert set(variants.DEFAULT_VARIANTS) <= set(variants.VARIANTS)
    assert {v.runner for v in variants.VARIANTS.values()} <= set(RUNNERS)
    assert variants.ratio_bases() == ["i2s-onnx-attn", "f32", "int8", "ort-int8"]
    assert variants.parse_variants(" i2s,f32,i2s,") == ["i2s", "f32"]
    # one i2s-<family> row per family the op library states, each forcing its family in its worker
    families = [family.name for family in customops.dispatch().families]
    assert [(v.name, v.env) for v in variants.family_variants().values()] == [
        (f"i2s-{family}", ((customops.KERNEL_ENV, family),)) for family in families]
    family_rows = ", ".join(f"i2s-{family}" for family in families)
    with pytest.raises(BitnetOnnxError, match=f"--variants 'i2s,fp8': choose from i2s, {family_rows}, i2s-onnx-attn, f32"):
        variants.parse_variants("i2s,fp8")
    assert variants.variants_help() == (
        f"weight variants to compare (default i2s,int8,ort-int8,nbits,f32,openvino; also {family_rows}, i2s-onnx-attn, "
        "f16, nbits2, nbits4, i2s-text, llama.cpp-f16, llama.cpp-tq2_0; "
        + "".join(f"i2s-{family} = i2s with BITNET_ONNX_KERNEL={family}; " for family in families) +
        "i2s-onnx-attn = i2s with the stock ONNX attention instead of EncoderAttention (export --attention onnx); "
        "ort-int8 = ORT's quantize_dynamic of the f32 export; "
        "i2s-text = i2s fed texts, the tokenizer in the graph (export --text-input); "
        "llama.cpp-f16 = upstream llama.cpp on convert-gguf's f16 file, without BitNet's per-projection norms; "
        "llama.cpp-tq2_0 = that file quantized by llama.cpp to TQ2_0, its fastest ternary type; "
        "openvino = OpenVINO's CPU runtime at its default precision on the f32 export with the stock attention "
        "(export --weights f32 --attention onnx; pip install 'bitnet-onnx[openvino]'))")


def test_a_variant_whose_runtime_is_not_installed_is_unavailable(monkeypatch):
    """A runner's optional package missing makes its variants unavailable, with the install line; the
    ONNX Runtime variants always run."""
    monkeypatch.setitem(sys.modules, "openvino", None)  # importlib.util.find_spec: not installed
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    assert unavailable("openvino") == "openvino is not installed (pip install 'bitnet-onnx[openvino]')"
    assert unavailable("llama.cpp-tq2_0").startswith("the llama.cpp variants need llama-cpp-python")
    assert [v for v in variants.VARIANTS if unavailable(v)] == ["llama.cpp-f16", "llama.cpp-tq2_0", "openvino"]


def test_worker_reports_a_load_error_as_one_line(tmp_path):
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        Worker("i2s", tmp_path, threads=1)


def test_a_variants_environment_reaches_its_worker_only(tiny_model, tiny_export, monkeypatch):
    monkeypatch.delenv("BITNET_ONNX_KERNEL", raising=False)
    folder = tiny_export(tiny_model("qwen3"), weights="i2s")
    with pytest.raises(BitnetOnnxError, match="BITNET_ONNX_KERNEL=bogus: unknown kernel family"):
        Worker("i2s", folder, threads=1, env=(("BITNET_ONNX_KERNEL", "bogus"),))
    assert len(variants.family_variants()) >= 2  # mul and lut at least
    for name, row in variants.family_variants().items():  # every family's variant loads and runs
        worker = Worker(name, folder, threads=1, env=row.env)
        assert worker.time_ms(1, 16) > 0
        worker.close()


def test_host_facts():
    assert host.cpu_name().strip()
    # a fresh process: this one's high-water mark may already be far above a small allocation
    code = ("import numpy as np; from bitnet_onnx.bench.host import peak_rss_bytes; before = peak_rss_bytes(); "
            "block = np.ones(64 << 20, dtype=np.uint8); print(before, peak_rss_bytes())")
    before, after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout.split())
    assert before > 0 and after - before >= 60 << 20  # the touched 64 MiB


def test_available_memory(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
    assert host.available_memory_bytes(meminfo) == 20000000 * 1024
    assert host.available_memory_bytes() > 0  # this machine's


def test_cpu_name_on_aarch64(tmp_path):
    """aarch64's /proc/cpuinfo has no model name: Arm's server cores are named from their part."""
    core = "processor\t: {}\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd asimddp i8mm\nCPU implementer\t: {}\nCPU part\t: {}\n"
    graviton3 = tmp_path / "graviton3"
    graviton3.write_text("\n".join(core.format(i, "0x41", "0xd40") for i in range(2)))
    assert host.cpu_name(graviton3) == "Neoverse V1"
    other = tmp_path / "other"
    other.write_text(core.format(0, "0xc0", "0xac3"))
    assert host.cpu_name(other) == f"{platform.machine()} (CPU implementer 0xc0, part 0xac3)"
