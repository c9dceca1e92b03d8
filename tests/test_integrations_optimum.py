"""optimum's ORTModelForFeatureExtraction and sentence-transformers' ONNX backend (optimum underneath)
load an ``export --layout hf`` folder of each architecture with their plain calls
(``SentenceTransformer(OUT, backend="onnx")``, ``ORTModelForFeatureExtraction.from_pretrained(OUT)``: no
``file_name``, no ``subfolder``) and give ``Embedder.encode``'s vectors, the query prompt honoured, for
the tiny models and at the released widths (weights in external data): i2s with our op library
registered in the session options they take, int8 with no argument at all (at the real widths' max_length,
32768, too: its attention is ONNX Runtime's own).

optimum-onnx pins transformers < 4.58, so the loaders run in a separate venv (tests/optimum_support.py
says how). The venv's sentence-transformers 5.7.0 also quantizes to bitnet_onnx.precision's bytes (docs/precision.md)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from integrations_support import ARCHS, REAL_SIZE_TEXTS, TEXTS, assert_same_vectors
from optimum_support import OPTIMUM_VENV_REQUIREMENTS, check_loaders, run_child, run_loaders

from bitnet_onnx import Embedder
from bitnet_onnx.cli import main
from bitnet_onnx.manifest import HF_EXTERNAL_DATA_FILE, Manifest

pytestmark = pytest.mark.venv  # the suite's tiers: tests/suite_marks.py

# weights -> its export's graph needs our op library (at the real widths' max_length, 32768, int8's
# attention is ONNX Runtime's own: still no library)
WEIGHTS = {"i2s": True, "int8": False}

# include_prompt: false exports: the top-level graph takes prompt_length, which optimum does not feed,
# so the plain call fails by name and file_name="onnx/model.onnx" is the documented way in
CHILD_PROMPT_LEFT_OUT = textwrap.dedent("""\
    import json, os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import numpy as np, torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    job = json.load(open(sys.argv[1]))
    folder, out = job["folder"], job["out"]
    try:
        SentenceTransformer(folder, backend="onnx").encode(job["texts"])
        error = ""
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    json.dump({"plain_call_error": error}, open(f"{out}/plain.json", "w"))
    model = SentenceTransformer(folder, backend="onnx", model_kwargs={"file_name": "onnx/model.onnx"})
    np.save(f"{out}/st.npy", model.encode(job["texts"]))
    np.save(f"{out}/st_query.npy", model.encode(job["texts"], prompt_name="query"))
    """)


# sentence-transformers 5.7.0's quantize_embeddings on the arrays this process writes (docs/precision.md
# says which versions give our bytes; 6.x is the project venv's, tested in tests/test_precision.py)
CHILD_QUANTIZE = textwrap.dedent("""\
    import json, sys
    import numpy as np
    import sentence_transformers
    from sentence_transformers.util.quantization import quantize_embeddings

    job = json.load(open(sys.argv[1]))
    ranges = np.load(job["ranges"])
    for width in job["widths"]:
        floats = np.load(f"{job['out']}/floats-{width}.npy")
        for precision in job["precisions"]:
            np.save(f"{job['out']}/{precision}-{width}.npy",
                    quantize_embeddings(floats, precision=precision, ranges=ranges[:, :width]))
    json.dump({"version": sentence_transformers.__version__}, open(f"{job['out']}/version.json", "w"))
    """)


@pytest.fixture(scope="module")
def loaded(optimum_venv, tiny_model, tmp_path_factory):
    """The tiny models' exports, every loader of CHILD."""
    root = tmp_path_factory.mktemp("optimum")
    exports = {}
    for arch in ARCHS:
        for weights in WEIGHTS:
            folder = root / f"{arch}-{weights}"
            assert main(["export", str(tiny_model(arch)), "-o", str(folder), "--weights", weights,
                         "--layout", "hf"]) == 0
            exports[arch, weights] = folder
    return run_loaders(optimum_venv, root, exports)


@pytest.fixture(scope="module")
def loaded_real_width(optimum_venv, real_width_layout_export, tmp_path_factory):
    """The same at the released widths and vocabularies (weights in external data: one file,
    onnx/model.onnx_data, that both model.onnx files name)."""
    exports = {(arch, weights): real_width_layout_export(arch, weights) for arch in ARCHS for weights in WEIGHTS}
    return run_loaders(optimum_venv, tmp_path_factory.mktemp("optimum-real"), exports, REAL_SIZE_TEXTS)


def test_venv_holds_the_pinned_versions(optimum_venv):
    installed = json.loads((optimum_venv / "bitnet-onnx-venv-complete.json").read_text())["installed"]
    for requirement in OPTIMUM_VENV_REQUIREMENTS:
        name, version = requirement.split("==")
        assert any(line.lower().replace("_", "-").startswith(f"{name}==")
                   and line.split("==")[1].split("+")[0] == version for line in installed), (requirement, installed)
    assert not any(line.startswith(("bitnet-onnx", "bitnet_onnx")) for line in installed)


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_optimum_and_sentence_transformers_onnx_give_the_embedders_vectors(loaded, arch, weights):
    folder, got, files = loaded[arch, weights]
    assert Manifest.read(folder).needs_custom_ops == WEIGHTS[weights]
    check_loaders(folder, got, files)


def test_include_prompt_false_needs_the_file_name(optimum_venv, tiny_model, tmp_path):
    """The one case the plain call does not serve (docs/integrations.md says so): the top-level graph of
    an include_prompt: false export takes prompt_length; file_name="onnx/model.onnx" loads the layout's
    graph, and sentence-transformers' Pooling leaves the prompt out as our graph does."""
    import shutil

    model = shutil.copytree(tiny_model("gemma3"), tmp_path / "model")
    pooling_file = model / "1_Pooling" / "config.json"
    pooling_file.write_text(json.dumps({**json.loads(pooling_file.read_text()), "include_prompt": False}))
    folder = tmp_path / "out"
    assert main(["export", str(model), "-o", str(folder), "--weights", "int8", "--layout", "hf"]) == 0
    run_child(optimum_venv, tmp_path, CHILD_PROMPT_LEFT_OUT, {"folder": str(folder), "out": str(tmp_path), "texts": TEXTS},
              timeout=900)
    assert "prompt_length" in json.loads((tmp_path / "plain.json").read_text())["plain_call_error"]
    embedder = Embedder(folder, threads=1)
    assert embedder.prompt_length(embedder.prompts["query"]) > 0  # the query's tokens are left out
    query = embedder.encode(TEXTS, prompt_name="query")
    assert not np.allclose(query, embedder.encode(TEXTS, prompt=""), atol=1e-3)
    assert_same_vectors(np.load(tmp_path / "st.npy"), embedder.encode(TEXTS))
    assert_same_vectors(np.load(tmp_path / "st_query.npy"), query)


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.real_size
def test_the_plain_calls_at_the_real_widths(loaded_real_width, arch, weights):
    """At the released max_length, 32768, too: int8 keeps ONNX Runtime's own attention, no library."""
    folder, got, files = loaded_real_width[arch, weights]
    m = Manifest.read(folder)
    assert (m.max_length, m.needs_custom_ops) == (32768, WEIGHTS[weights])
    assert (folder / HF_EXTERNAL_DATA_FILE).stat().st_size > 64 << 20  # the weights are in external data
    check_loaders(folder, got, files, texts=REAL_SIZE_TEXTS)


def test_sentence_transformers_5_7_quantizes_to_our_bytes(optimum_venv, tmp_path):
    """docs/precision.md's statement for sentence-transformers 5.7.0: every precision gives
    bitnet_onnx.precision's bytes given float32 ranges: values outside the ranges clipped, a constant
    dimension scaled by 1, each row's bits packed on their own (37 values: 5 bytes, the last padded;
    40: whole bytes)."""
    from bitnet_onnx.precision import NAMES, PRECISIONS, calibration_ranges, quantize

    widths = (37, 40)
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((64, max(widths))).astype(np.float32)
    ranges = calibration_ranges(floats[:16])  # most rows fall outside these
    ranges[:, 3] = 0.25  # a constant dimension: step 1
    np.save(tmp_path / "ranges.npy", ranges)
    for width in widths:
        np.save(tmp_path / f"floats-{width}.npy", floats[:, :width])
    job = {"out": str(tmp_path), "ranges": str(tmp_path / "ranges.npy"), "widths": widths, "precisions": NAMES}
    run_child(optimum_venv, tmp_path, CHILD_QUANTIZE, job, timeout=600)
    assert json.loads((tmp_path / "version.json").read_text())["version"] == "5.7.0"
    for width in widths:
        for name in NAMES:
            theirs = np.load(tmp_path / f"{name}-{width}.npy")
            ours = quantize(floats[:, :width], name, ranges[:, :width] if PRECISIONS[name].needs_ranges else None)
            assert theirs.dtype == ours.dtype and theirs.shape == ours.shape, (name, width, theirs.dtype, theirs.shape)
            assert theirs.tobytes() == ours.tobytes(), (name, width)
