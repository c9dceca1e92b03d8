"""``export --layout hf`` at the real widths and vocabularies (Qwen3-0.6B: 151,936 tokens; Gemma3-270M:
262,144), where the weights go to external data: the verb succeeds, ``onnx/model.onnx_data`` is a byte copy
of the top folder's weight file (same offsets), and its ``last_hidden_state`` equals the exported graph's
``token_embeddings`` and ``last_hidden_state``. One export per (arch, weights), the real widths with the
demo's few layers (tests/conftest.py's real_width_layout_export)."""

from __future__ import annotations

import filecmp
import os

import numpy as np
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.export.hf_layout import HF_EXTERNAL_DATA_NAME, HF_MODEL_FILE, LAST_HIDDEN_STATE
from bitnet_onnx.export.writer import EXTERNAL_DATA_NAME
from bitnet_onnx.manifest import MODEL_NAME, Manifest

pytestmark = pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py

WEIGHTS = ("int8", "i2s")


def _session(path, needs_custom_ops):
    options = customops.session_options() if needs_custom_ops else ort.SessionOptions()
    return ort.InferenceSession(str(path), options)


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_layout_copies_the_exports_external_weights(real_width_layout_export, arch, weights):
    out = real_width_layout_export(arch, weights)
    top, shared = out / EXTERNAL_DATA_NAME, out / "onnx" / HF_EXTERNAL_DATA_NAME
    assert top.stat().st_size > 64 << 20  # the case at hand: weights in external data
    assert not os.path.samefile(top, shared) and filecmp.cmp(top, shared, shallow=False)
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
