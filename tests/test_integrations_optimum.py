"""optimum's ORTModelForFeatureExtraction and sentence-transformers' ONNX backend (optimum underneath)
load an ``export --layout hf`` folder of each architecture and give ``Embedder.encode``'s vectors, the
query prompt honoured: the i2s export with our op library registered in the session options they
take, the int8 export with ORT's plain ones.

optimum's ONNX Runtime part (PyPI optimum-onnx) pins transformers < 4.58, which the project's venv
(transformers 5, sentence-transformers 6) cannot hold, so the loaders run in a separate venv of the
versions pinned below (tests/venvs.py, built once and kept under ~/.cache/bitnet-onnx-tests/): a child
script there embeds TEXTS and writes .npy files; this process exports and compares. The child does not
import bitnet_onnx: it registers our library (this checkout's, by path) with onnxruntime's
``SessionOptions.register_custom_ops_library``, what ``bitnet_onnx.customops.session_options()`` does."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from integrations_support import ARCHS, TEXTS, assert_same_vectors
from venvs import cached_venv, isolated_env, run_ok

from bitnet_onnx import Embedder, customops
from bitnet_onnx.cli import main
from bitnet_onnx.manifest import Manifest

# The newest optimum-onnx and what it allows: transformers < 4.58 (so sentence-transformers 5,
# whose ONNX backend is optimum's); onnxruntime as in the project's venv; torch's CPU wheel.
OPTIMUM_VENV_REQUIREMENTS = [
    "optimum-onnx==0.1.0",
    "transformers==4.57.6",
    "sentence-transformers==5.7.0",
    "onnxruntime==1.32.0",
    "torch==2.13.0",
]
WEIGHTS = {"i2s": True, "int8": False}  # weights -> its graph needs our op library

CHILD = textwrap.dedent("""\
    import json, os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import numpy as np, onnxruntime as ort, torch
    from optimum.onnxruntime import ORTModelForFeatureExtraction
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    job = json.load(open(sys.argv[1]))
    texts = job["texts"]

    def session_options(custom_ops):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        if custom_ops:
            so.register_custom_ops_library(job["library"])
        return so

    for export in job["exports"]:
        folder, out = export["folder"], export["out"]
        os.makedirs(out, exist_ok=True)
        model = SentenceTransformer(folder, backend="onnx", device="cpu", model_kwargs={
            "file_name": "onnx/model.onnx", "session_options": session_options(export["custom_ops"])})
        np.save(f"{out}/st.npy", model.encode(texts))
        np.save(f"{out}/st_query.npy", model.encode(texts, prompt_name="query"))

        # optimum alone: its last_hidden_state, pooled by the layout's own modules after the Transformer
        optimum = ORTModelForFeatureExtraction.from_pretrained(
            folder, subfolder="onnx", session_options=session_options(export["custom_ops"]))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for name, prompt in (("optimum", ""), ("optimum_query", model.prompts["query"])):
            enc = tokenizer([prompt + t for t in texts], padding=True, truncation=True,
                            max_length=model.max_seq_length, return_tensors="pt")
            with torch.inference_mode():
                features = {"token_embeddings": optimum(**enc).last_hidden_state,
                            "attention_mask": enc["attention_mask"]}
                for module in list(model)[1:]:
                    features = module(features)
            np.save(f"{out}/{name}.npy", features["sentence_embedding"].numpy())
        print(folder, type(model[0].auto_model).__name__, type(optimum).__name__)
    """)


@pytest.fixture(scope="module")
def optimum_venv():
    """The pinned venv (built once per machine, reused while the pins stay); a failed pip fails here."""
    return cached_venv("optimum-venv", OPTIMUM_VENV_REQUIREMENTS)


@pytest.fixture(scope="module")
def loaded(optimum_venv, tiny_model, tmp_path_factory):
    """(arch, weights) -> (export folder, {result name: vectors}) from one run of CHILD over all exports."""
    root = tmp_path_factory.mktemp("optimum")
    exports = {}
    for arch in ARCHS:
        for weights in WEIGHTS:
            folder = root / f"{arch}-{weights}"
            assert main(["export", str(tiny_model(arch)), "-o", str(folder), "--weights", weights,
                         "--layout", "hf"]) == 0
            exports[arch, weights] = folder
    job = {"library": customops.library_path(), "texts": TEXTS,
           "exports": [{"folder": str(folder), "custom_ops": WEIGHTS[weights], "out": str(root / f"out-{arch}-{weights}")}
                       for (arch, weights), folder in exports.items()]}
    (root / "job.json").write_text(json.dumps(job))
    (root / "child.py").write_text(CHILD)
    res = run_ok([optimum_venv / "bin" / "python", root / "child.py", root / "job.json"], timeout=900,
                 env=isolated_env(optimum_venv), cwd=root)
    # the loaders really were optimum's: sentence-transformers' Transformer module holds an ORTModel
    assert res.stdout.count("ORTModelForFeatureExtraction ORTModelForFeatureExtraction") == len(exports), res.stdout
    return {key: (folder, {name: np.load(root / f"out-{key[0]}-{key[1]}" / f"{name}.npy")
                           for name in ("st", "st_query", "optimum", "optimum_query")})
            for key, folder in exports.items()}


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
    folder, got = loaded[arch, weights]
    assert Manifest.read(folder).needs_custom_ops == WEIGHTS[weights]
    embedder = Embedder(folder, threads=1)
    assert embedder.prompts.get("query"), "the tiny model's query prompt is what the query checks exercise"
    plain, query = embedder.encode(TEXTS, prompt=""), embedder.encode(TEXTS, prompt_name="query")
    assert not np.allclose(plain, query, atol=1e-3)  # the prompt changes the vectors: its checks mean something
    assert_same_vectors(got["st"], embedder.encode(TEXTS))  # both take the export's default prompt, if any
    assert_same_vectors(got["st_query"], query)
    assert_same_vectors(got["optimum"], plain)
    assert_same_vectors(got["optimum_query"], query)
