"""``export --layout hf`` at the real widths and vocabularies (Qwen3-0.6B: 151,936 tokens; Gemma3-270M:
262,144), where every weight variant's weights go to external data: the verb succeeds, the weights are
on disk once (``onnx/model.onnx_data``, which both model.onnx files name: no ``model.onnx.data`` beside
it), byte for byte the data file of the plain export of the same model, and the folder is the plain
export's size plus less than one external data file could be; the layout's ``last_hidden_state``
equals the exported graph's ``token_embeddings`` and ``last_hidden_state``, and ``Embedder`` gives the
plain export's vectors. One export per (arch, weights), the real widths with the demo's few layers
(tests/conftest.py's real_width_layout_export), and its plain twin made here (seconds each)."""

from __future__ import annotations

import filecmp
import os

import numpy as np
import onnxruntime as ort
import pytest
from integrations_support import external_locations

from bitnet_onnx import Embedder, customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main
from bitnet_onnx.export.hf_layout import HF_EXTERNAL_DATA_NAME, HF_MODEL_FILE, LAST_HIDDEN_STATE
from bitnet_onnx.export.writer import EXTERNAL_DATA_THRESHOLD
from bitnet_onnx.formats import NAMES
from bitnet_onnx.manifest import EXTERNAL_DATA_NAME, HF_EXTERNAL_DATA_FILE, MODEL_NAME, Manifest

pytestmark = pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py

TEXTS = ["a short text", "Ternary weights make matrix products cheap: additions and subtractions. " * 8]


def _session(path, needs_custom_ops):
    options = customops.session_options() if needs_custom_ops else ort.SessionOptions()
    return ort.InferenceSession(str(path), options)


def _folder_bytes(folder) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.fixture
def plain_export(real_width_model, tmp_path):
    """plain_export(arch, weights) -> the default-layout export of the model real_width_layout_export exports."""

    def make(arch: str, weights: str):
        out = tmp_path / f"plain-{arch}-{weights}"
        assert main(["export", str(real_width_model(arch)), "-o", str(out), "--weights", weights]) == 0
        return out

    return make


@pytest.mark.parametrize("weights", NAMES)
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_layout_stores_the_exports_weights_once(real_width_layout_export, plain_export, arch, weights):
    out, plain = real_width_layout_export(arch, weights), plain_export(arch, weights)
    data = out / HF_EXTERNAL_DATA_FILE
    assert data.stat().st_size > EXTERNAL_DATA_THRESHOLD  # the case at hand: weights in external data
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
