"""embed-dataset and the Ray Data stage on a local Ray cluster (started and stopped here)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")  # the `ray` extra; CI installs it with the test extra
pq = pytest.importorskip("pyarrow.parquet")
ray = pytest.importorskip("ray")

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main  # noqa: E402
from bitnet_onnx.errors import BitnetOnnxError  # noqa: E402
from bitnet_onnx.runtime.dataset import EmbedOptions, embed_dataset, read_output, run_job  # noqa: E402
from bitnet_onnx.runtime.embedder import Embedder  # noqa: E402

TEXTS = [f"passage {i}: " + "the quick brown fox " * (i % 9) + f"ends here {i * 7}" for i in range(90)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def exported(tiny_model, tiny_export):
    """exported(arch) -> the shared i2s export of the session's tiny model."""
    return lambda arch: tiny_export(tiny_model(arch), "i2s")


def _parquet(path: Path, texts=TEXTS, ids=True, row_group_size=40) -> Path:
    columns = {"text": texts}
    if ids:
        columns["id"] = [f"doc-{i}" for i in range(len(texts))]
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def _jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_job_on_parquet_equals_embedder_with_prompt_and_dimensions(local_ray, exported, tmp_path, arch):
    export_dir = exported(arch)
    prompt = next(iter(Embedder(export_dir).prompts))
    opts = EmbedOptions(prompt_name=prompt, dimensions=64, batch_size=8)
    summary = run_job(export_dir, _parquet(tmp_path / "in.parquet"), tmp_path / "out", opts, block_rows=25)
    ids, vectors, counts = read_output(tmp_path / "out")
    emb = Embedder(export_dir)
    expected = emb.encode(TEXTS, prompt_name=prompt, dimensions=64)
    assert ids == [f"doc-{i}" for i in range(len(TEXTS))]
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert counts.tolist() == [len(x) for x in emb.tokenize(TEXTS, prompt_name=prompt)]
    # row groups of 40, 40, 10 rows in blocks of at most 25: 25+15, 25+15, 10
    assert (summary.blocks, summary.skipped, summary.texts, summary.tokens) == (5, 0, 90, int(counts.sum()))


def test_job_on_jsonl_folder_and_resume_after_lost_parts(local_ray, exported, tmp_path):
    export_dir = exported("qwen3")
    src = tmp_path / "corpus"
    src.mkdir()
    _jsonl(src / "a.jsonl", [{"text": t, "id": i} for i, t in enumerate(TEXTS[:50])])
    _jsonl(src / "b.jsonl", [{"text": t} for t in TEXTS[50:]])  # no ids: "<file>:<row>"
    out = tmp_path / "out"
    run_job(export_dir, src, out, EmbedOptions(), block_rows=20)
    ids, first, _ = read_output(out)
    assert ids == list(range(50)) + [f"b.jsonl:{r}" for r in range(40)]
    np.testing.assert_allclose(first, Embedder(export_dir).encode(TEXTS), atol=1e-5)

    for part in sorted(out.glob("part-*.parquet"))[1::2]:  # an interrupted run: half the parts missing
        part.unlink()
    (out / "_SUCCESS").unlink()
    with pytest.raises(BitnetOnnxError, match="did not complete"):
        read_output(out)
    again = run_job(export_dir, src, out, EmbedOptions(), block_rows=20)
    # a.jsonl: 20 + 20 + 10 lines, b.jsonl: 20 + 20; the 2nd and 4th parts were lost
    assert (again.blocks, again.skipped, again.texts) == (5, 3, 40)
    ids2, second, _ = read_output(out)
    assert ids2 == ids
    np.testing.assert_array_equal(second, first)
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temp files left behind"


def test_ray_data_stage_composes_with_a_pipeline(local_ray, exported):
    export_dir = exported("gemma3")
    ds = ray.data.from_items([{"text": t, "n": i} for i, t in enumerate(TEXTS[:30])])
    rows = embed_dataset(ds, export_dir, dimensions=32, rows_per_batch=7).filter(lambda r: r["n"] % 2 == 0).take_all()
    rows.sort(key=lambda r: r["n"])
    expected = Embedder(export_dir).encode(TEXTS[:30:2], dimensions=32)
    np.testing.assert_allclose(np.stack([r["embedding"] for r in rows]), expected, atol=1e-5)
    assert all(r["token_count"] > 0 for r in rows)


@pytest.mark.slow
def test_killed_job_reruns_to_the_same_output(local_ray, exported, tmp_path, capsys):
    """A job killed with its local Ray cluster (a process group of its own) and run again: the rerun keeps the
    parts the killed one finished and gives the uninterrupted job's output. The reference and the rerun run in
    this process, on the module's Ray (the verb is the same; only the killed job needs a process to kill)."""
    export_dir = exported("qwen3")
    texts = TEXTS * 4
    src = _parquet(tmp_path / "in.parquet", texts, row_group_size=30)
    args = ["embed-dataset", str(export_dir), str(src)]
    assert main([*args, str(tmp_path / "ref"), "--block-rows", "15"]) == 0
    cmd = [sys.executable, "-m", "bitnet_onnx", *args]
    out = tmp_path / "out"
    job = subprocess.Popen(cmd + [str(out), "--block-rows", "15"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("part-*.parquet")) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)  # the job and its local Ray cluster
    job.wait()
    assert not (out / "_SUCCESS").exists(), "the job finished before it could be killed; use more blocks"
    capsys.readouterr()
    assert main([*args, str(out), "--block-rows", "15"]) == 0
    assert "already done" in capsys.readouterr().out
    ids, vectors, _ = read_output(out)
    ref_ids, ref_vectors, _ = read_output(tmp_path / "ref")
    assert ids == ref_ids and len(set(ids)) == len(texts)
    np.testing.assert_array_equal(vectors, ref_vectors)


@pytest.mark.parametrize("case, message", [
    ("missing_column", r"in\.parquet: no column 'text'"),
    ("null_text", r"in\.parquet: row 3: 'text' is null"),
    ("number_text", r"in\.jsonl: line 2: .*|in\.jsonl: row 1: 'text' is int"),
    ("unreadable", r"in\.parquet: not a readable Parquet file"),
    ("bad_dimensions", r"dimensions must be an integer from 1 to \d+, got 9999"),  # the Embedder's words
])
def test_bad_inputs_name_file_and_row_and_leave_no_success(local_ray, exported, tmp_path, capsys, case, message):
    export_dir = exported("qwen3")
    args = []
    if case == "missing_column":
        src = tmp_path / "in.parquet"
        pq.write_table(pa.table({"body": TEXTS[:5]}), src)
    elif case == "null_text":
        src = tmp_path / "in.parquet"
        pq.write_table(pa.table({"text": TEXTS[:3] + [None] + TEXTS[4:6]}), src)
    elif case == "number_text":
        src = _jsonl(tmp_path / "in.jsonl", [{"text": "fine"}, {"text": 42}])
    elif case == "unreadable":
        src = tmp_path / "in.parquet"
        src.write_bytes(b"PAR1 this is not parquet")
    else:
        src = _parquet(tmp_path / "in.parquet", TEXTS[:5])
        args = ["--dimensions", "9999"]
    out = tmp_path / "out"
    assert main(["embed-dataset", str(export_dir), str(src), str(out), *args]) == 1
    # Ray's own progress lines may come first (a job that started); our error is one line, the last
    ours = [line for line in capsys.readouterr().err.strip().splitlines() if "bitnet-onnx" in line]
    assert len(ours) == 1 and re.search(message, ours[0]), ours
    assert not (out / "_SUCCESS").exists()
    assert not [p for p in (out.iterdir() if out.exists() else []) if p.name.startswith(".")]


def test_the_package_does_not_import_ray():
    code = ("import sys, bitnet_onnx, bitnet_onnx.cli, bitnet_onnx.runtime.embedder, bitnet_onnx.export.exporter, "
            "bitnet_onnx.commands.embed_dataset; sys.exit(1 if 'ray' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_precision_columns_equal_quantize_embeddings_and_resume(local_ray, exported, tmp_path, arch, capsys):
    """embed-dataset --precision: typed Parquet columns holding sentence-transformers' bytes, resumable;
    the Ray Data stage too; int8 without ranges refused before anything is written."""
    # a plain import: the reference moving fails the test instead of skipping it
    from sentence_transformers.util.quantization import quantize_embeddings

    export_dir = exported(arch)
    emb = Embedder(export_dir, threads=1)
    ranges_file = tmp_path / "ranges.json"
    table = emb.calibrate(TEXTS, dimensions=(64,), path=ranges_file)
    src = tmp_path / "corpus"
    src.mkdir()
    halves = (TEXTS[:50], TEXTS[50:])
    for name, texts in zip("ab", halves):
        _parquet(src / f"{name}.parquet", texts, row_group_size=len(texts))
    for precision, arrow_type in (("int8", pa.list_(pa.int8(), 64)), ("ubinary", pa.binary(8))):
        out = tmp_path / precision
        argv = ["embed-dataset", str(export_dir), str(src), str(out), "--precision", precision, "--dimensions", "64",
                "--block-rows", "100", "--batch-size", "8", "--ranges", str(ranges_file)]
        assert main(argv) == 0
        ranges = table[64] if precision == "int8" else None
        want = np.concatenate([quantize_embeddings(emb.encode(list(t), dimensions=64, batch_size=8),
                                                   precision=precision, ranges=ranges) for t in halves])
        _, vectors, _ = read_output(out)
        assert vectors.dtype == want.dtype and vectors.tobytes() == want.tobytes()
        assert pq.read_schema(sorted(out.glob("part-*"))[0]).field("embedding").type == arrow_type
        sorted(out.glob("part-*"))[1].unlink()  # interrupted: resumed to the same bytes
        (out / "_SUCCESS").unlink()
        assert main(argv) == 0
        assert read_output(out)[1].tobytes() == want.tobytes()
    other = tmp_path / "other.json"
    emb.calibrate(TEXTS[:10], dimensions=(64,), path=other)
    assert main(["embed-dataset", str(export_dir), str(src), str(tmp_path / "int8"), "--precision", "int8",
                 "--dimensions", "64", "--block-rows", "100", "--ranges", str(other)]) == 1
    assert "ranges differ" in capsys.readouterr().err
    assert main(["embed-dataset", str(export_dir), str(src), str(tmp_path / "none"), "--precision", "uint8"]) == 1
    err = capsys.readouterr().err
    assert "needs calibration ranges [2, " in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()

    ds = ray.data.from_items([{"text": t} for t in TEXTS[:20]])
    staged = embed_dataset(ds, export_dir, precision="binary", rows_per_batch=20).materialize()
    assert staged.schema().base_schema.field("embedding").type == pa.list_(pa.int8(), emb.dimension // 8)
    stage = np.array([r["embedding"] for r in staged.take_all()])
    want = quantize_embeddings(emb.encode(TEXTS[:20]), precision="binary")
    assert stage.tolist() == want.tolist()
