"""``export --layout hf`` at the real widths and vocabularies (Qwen3-0.6B: 151,936 tokens; Gemma3-270M:
262,144), where every weight variant's weights go to external data: the verb succeeds, the weights are
on disk once (``onnx/model.onnx_data``, which both model.onnx files name: no ``model.onnx.data`` beside
it), byte for byte the data file of the plain export of the same model.

- At the demo's few layers (tests/conftest.py's real_width_layout_export, and its plain twin made here,
  seconds each): the layout's ``last_hidden_state`` equals the exported graph's ``token_embeddings`` and
  ``last_hidden_state``, and ``Embedder`` gives the plain export's vectors.
- At full depth with the released tokenizers (what a user exports; real_width_model at every layer): the
  folder takes no more disk than the plain export plus its tokenizer files, docs/integrations.md's sizes
  hold, sentence-transformers' and optimum's plain calls (optimum's venv) give ``Embedder``'s vectors, and
  the int8 layout, at max_length 32768, holds ONNX Runtime's own ops only and loads with no argument."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from integrations_support import REAL_SIZE_TEXTS, external_locations, plain_ort_session
from optimum_support import check_loaders, run_loaders

from bitnet_onnx import Embedder, customops
from bitnet_onnx.arch import ARCHITECTURES, REAL_SHAPES
from bitnet_onnx.cli import main
from bitnet_onnx.export.hf_layout import HF_EXTERNAL_DATA_NAME, HF_MODEL_FILE, LAST_HIDDEN_STATE
from bitnet_onnx.export import writer
from bitnet_onnx.export.writer import EXTERNAL_DATA_THRESHOLD, TOKENIZER_FILES
from bitnet_onnx.formats import NAMES
from bitnet_onnx.manifest import EXTERNAL_DATA_NAME, HF_EXTERNAL_DATA_FILE, MODEL_NAME, Manifest
from bitnet_onnx.testing.real_tokenizers import real_tokenizer_dir

pytestmark = pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["a short text", "Ternary weights make matrix products cheap: additions and subtractions. " * 8]


def _session(path, needs_custom_ops):
    options = customops.session_options() if needs_custom_ops else ort.SessionOptions()
    return ort.InferenceSession(str(path), options)


def _folder_bytes(folder) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.fixture
def plain_export(real_width_model, tmp_path, monkeypatch):
    """plain_export(arch, weights) -> (the default-layout export of the model real_width_layout_export exports,
    the bytes of the graph the writer saved as model.onnx, as it held them in memory)."""
    save, graph_bytes = writer.save_model, []

    def save_and_measure(model, folder):
        graph_bytes.append(model.ByteSize())
        return save(model, folder)

    monkeypatch.setattr(writer, "save_model", save_and_measure)

    def make(arch: str, weights: str):
        graph_bytes.clear()
        out = tmp_path / f"plain-{arch}-{weights}"
        assert main(["export", str(real_width_model(arch)), "-o", str(out), "--weights", weights]) == 0
        return out, graph_bytes[0]

    return make


@pytest.mark.parametrize("weights", NAMES)
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_layout_stores_the_exports_weights_once(real_width_layout_export, plain_export, arch, weights):
    out, (plain, graph_bytes) = real_width_layout_export(arch, weights), plain_export(arch, weights)
    data = out / HF_EXTERNAL_DATA_FILE
    assert data.stat().st_size > EXTERNAL_DATA_THRESHOLD  # the case at hand: weights in external data
    # written to the file as the graph was built (writer.WeightFile): the graph in memory held none of them,
    # only what model.onnx holds (a copy of every weight there was the export's peak memory)
    assert graph_bytes == (plain / MODEL_NAME).stat().st_size < EXTERNAL_DATA_THRESHOLD // 64, graph_bytes
    assert not os.path.lexists(out / EXTERNAL_DATA_NAME)
    assert external_locations(out / MODEL_NAME) == {HF_EXTERNAL_DATA_FILE}  # both graphs read the one file
    assert external_locations(out / HF_MODEL_FILE) == {HF_EXTERNAL_DATA_NAME}
    assert filecmp.cmp(data, plain / EXTERNAL_DATA_NAME, shallow=False)  # the plain export's weights, offsets and all
    added = _folder_bytes(out) - _folder_bytes(plain)
    assert 0 < added < EXTERNAL_DATA_THRESHOLD, added  # the layout's own small files: no second weight file

    manifest = Manifest.read(out)
    full, token = _session(out / MODEL_NAME, manifest.needs_custom_ops), _session(out / HF_MODEL_FILE, manifest.needs_custom_ops)
    ids = np.array([[5, 17, 300, 9000, 2], [11, 12, 13, 0, 0]], dtype=np.int64)
    mask = (np.arange(5) < np.array([[5], [3]])).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask}
    full_feed = {i.name: feeds.get(i.name, np.zeros((2,), dtype=np.int64)) for i in full.get_inputs()}
    want, last = full.run(["token_embeddings", LAST_HIDDEN_STATE], full_feed)
    (got,) = token.run([LAST_HIDDEN_STATE], feeds)
    np.testing.assert_array_equal(last, want)  # the top-level graph's own last_hidden_state, what optimum may pick
    np.testing.assert_array_equal(got, want)
    del full, token
    np.testing.assert_array_equal(Embedder(out, threads=1).encode(TEXTS), Embedder(plain, threads=1).encode(TEXTS))


# -- full depth: what a user's export of a released checkpoint costs on disk -----------------------------
# the variants the optimum venv loads at full depth: one whose graph needs our op library, one that loads with
# no argument; the other variants' layouts are the same files around other ops (their files are checked here,
# their loaders at the demo's depth: test_integrations_optimum, test_integrations_hf_layout)
LOADED_AT_FULL_DEPTH = ("i2s", "int8")
# the variant for hosts that cannot load our op library (Java, C#, JS, mobile builds): ORT-native at the
# released max_length, its attention ONNX Runtime's own (export/memory.py)
NO_LIBRARY = "int8"
# Every variant at full depth on Gemma3 (the 262,144-entry tokenizer, where the rewritten tokenizer.json broke
# the bound once); on Qwen3, whose 28 full-depth layers make each export pair ten times the cost (2 GB of f32
# written twice), the variants the venv loads. The sizes decompose into the embedding table and the layers at
# each variant's width (docs/integrations.md), which the demo-depth test above holds byte for byte.
FULL_DEPTH_VARIANTS = {"gemma3": NAMES, "qwen3": LOADED_AT_FULL_DEPTH}
SIZES_TABLE = ROOT / "docs" / "integrations.md"


def _full_depth_model(real_width_model, arch: str):
    """A random-weight model of ``arch``'s released shape, every layer, with the released tokenizer: the
    files a user exports (the tokenizer is part of the bound the layout is held to)."""
    return real_width_model(arch, layers=REAL_SHAPES[arch].config["num_hidden_layers"],
                            tokenizer=str(real_tokenizer_dir(arch)))


def _tokenizer_bytes(folder) -> int:
    return sum((folder / name).stat().st_size for name in TOKENIZER_FILES if (folder / name).is_file())


def _check_loads_without_our_library(folder, arch: str) -> None:
    """Both graphs of the layout load with no argument at the released max_length."""
    m = Manifest.read(folder)
    assert (m.max_length, m.attention, m.needs_custom_ops) == (
        REAL_SHAPES[arch].config["max_position_embeddings"], "ort", False)
    for graph in (MODEL_NAME, HF_MODEL_FILE):
        plain_ort_session(folder / graph)


def _documented_megabytes(arch: str, weights: str) -> tuple[float, float]:
    """(plain export, with --layout hf) in MB as docs/integrations.md's full-depth table gives them: its row
    ``| weights | ... |`` holds a pair of columns per architecture, in sorted order."""
    rows = re.findall(rf"^\| {weights} \|((?: [\d.]+ MB \|)+)$", SIZES_TABLE.read_text(encoding="utf-8"), re.M)
    assert len(rows) == 1, f"{SIZES_TABLE.name}: {len(rows)} full-depth size rows for {weights}"
    values = [float(v) for v in re.findall(r"([\d.]+) MB", rows[0])]
    assert len(values) == 2 * len(ARCHITECTURES), rows[0]
    column = 2 * sorted(ARCHITECTURES).index(arch)
    return values[column], values[column + 1]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.venv
@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to ten full-depth exports and an optimum child over two
def test_full_depth_layout_takes_no_more_disk_than_the_plain_export_and_its_tokenizer(
        real_width_model, optimum_venv, tmp_path, arch):
    """The weight variants of FULL_DEPTH_VARIANTS at full depth: the ``--layout hf`` folder holds the plain export's data file, byte
    for byte, once, and takes at most the plain export's bytes plus its tokenizer files' (the layout's graph
    without weights and its JSON files, and the tokenizer.json it rewrites, come to less than the
    tokenizer); both sizes are docs/integrations.md's. The plain calls of sentence-transformers and optimum
    give ``Embedder``'s vectors on the i2s (our library registered) and int8 (no argument) layouts; int8's
    graphs, at max_length 32768, hold ONNX Runtime's own ops only and load in a session with no options."""
    model = _full_depth_model(real_width_model, arch)
    assert set(FULL_DEPTH_VARIANTS) == set(ARCHITECTURES) and set(FULL_DEPTH_VARIANTS["gemma3"]) == set(NAMES)
    for weights in FULL_DEPTH_VARIANTS[arch]:
        plain, out = tmp_path / f"plain-{weights}", tmp_path / f"hf-{weights}"
        assert main(["export", str(model), "-o", str(plain), "--weights", weights]) == 0
        assert main(["export", str(model), "-o", str(out), "--weights", weights, "--layout", "hf"]) == 0
        assert not os.path.lexists(out / EXTERNAL_DATA_NAME)
        assert external_locations(out / MODEL_NAME) == {HF_EXTERNAL_DATA_FILE}
        assert external_locations(out / HF_MODEL_FILE) == {HF_EXTERNAL_DATA_NAME}
        assert filecmp.cmp(out / HF_EXTERNAL_DATA_FILE, plain / EXTERNAL_DATA_NAME, shallow=False)
        plain_bytes, layout_bytes, tokenizer_bytes = _folder_bytes(plain), _folder_bytes(out), _tokenizer_bytes(plain)
        assert layout_bytes <= plain_bytes + tokenizer_bytes, (weights, plain_bytes, layout_bytes, tokenizer_bytes)
        documented = _documented_megabytes(arch, weights)
        assert np.allclose(documented, (plain_bytes / 1e6, layout_bytes / 1e6), atol=0.1), (
            weights, documented, plain_bytes, layout_bytes)
        if weights == NO_LIBRARY:
            _check_loads_without_our_library(out, arch)
        shutil.rmtree(plain)  # at most one full-depth export on disk beside the layouts the venv loads
        if weights not in LOADED_AT_FULL_DEPTH:
            shutil.rmtree(out)
    layouts = {weights: tmp_path / f"hf-{weights}" for weights in LOADED_AT_FULL_DEPTH}
    for weights, (folder, got, files) in run_loaders(optimum_venv, tmp_path, layouts, REAL_SIZE_TEXTS).items():
        assert Manifest.read(folder).needs_custom_ops == (weights == "i2s")
        check_loaders(folder, got, files, texts=REAL_SIZE_TEXTS)
