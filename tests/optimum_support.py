"""optimum's venv and the child that loads an ``export --layout hf`` folder with the plain calls, shared by
tests/test_integrations_optimum.py and the real Gemma3-270M's layout test (tests/test_integrations_hf_layout.py).

optimum's ONNX Runtime part (PyPI optimum-onnx) pins transformers < 4.58, which the project's venv
(transformers 5, sentence-transformers 6) cannot hold, so the loaders run in a separate venv of the
versions pinned below (tests/venvs.py, built once and kept under ~/.cache/bitnet-onnx-tests/; conftest's
``optimum_venv``): CHILD embeds TEXTS there and writes .npy files; the test process exports and compares.
CHILD does not import bitnet_onnx: it registers our library (this checkout's, by path) with onnxruntime's
``SessionOptions.register_custom_ops_library``, what ``bitnet_onnx.customops.session_options()`` does."""

from __future__ import annotations

import json
import textwrap

import numpy as np
from integrations_support import TEXTS, assert_same_vectors
from venvs import isolated_env, run_ok

from bitnet_onnx import Embedder, customops
from bitnet_onnx.export.hf_layout import HF_MODEL_FILE
from bitnet_onnx.manifest import MODEL_NAME, Manifest

# The newest optimum-onnx and what it allows: transformers < 4.58 (so sentence-transformers 5,
# whose ONNX backend is optimum's); onnxruntime as in the project's venv; torch's CPU wheel.
OPTIMUM_VENV_REQUIREMENTS = [
    "optimum-onnx==0.1.0",
    "transformers==4.57.6",
    "sentence-transformers==5.7.0",
    "onnxruntime==1.32.0",
    "torch==2.13.0",
]

# Each export's folder loaded by the plain calls, without and with its query prompt.
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

    def options(custom_ops):
        # what a user must add: our op library for a graph with our ops; nothing else (no file_name, no subfolder)
        if not custom_ops:
            return {}
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.register_custom_ops_library(job["library"])
        return {"session_options": so}

    def loaded_file(ort_model):
        return os.path.relpath(ort_model.session._model_path, folder)

    for export in job["exports"]:
        folder, out = export["folder"], export["out"]
        os.makedirs(out, exist_ok=True)
        kwargs = options(export["custom_ops"])
        # the plain call, as for any sentence-transformers ONNX model
        model = SentenceTransformer(folder, backend="onnx", **({"model_kwargs": kwargs} if kwargs else {}))
        np.save(f"{out}/st.npy", model.encode(texts))
        np.save(f"{out}/st_query.npy", model.encode(texts, prompt_name="query"))
        files = {"st": loaded_file(model[0].auto_model)}

        # optimum alone: its last_hidden_state, pooled by the layout's own modules after the Transformer;
        # the plain call, and subfolder="onnx" (the other model.onnx: both must give the same vectors)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for name, subfolder in (("optimum", None), ("optimum_subfolder", "onnx")):
            optimum = ORTModelForFeatureExtraction.from_pretrained(
                folder, **kwargs, **({"subfolder": subfolder} if subfolder else {}))
            files[name] = loaded_file(optimum)
            for suffix, prompt in (("", ""), ("_query", model.prompts["query"])):
                enc = tokenizer([prompt + t for t in texts], padding=True, truncation=True,
                                max_length=model.max_seq_length, return_tensors="pt")
                with torch.inference_mode():
                    features = {"token_embeddings": optimum(**enc).last_hidden_state,
                                "attention_mask": enc["attention_mask"]}
                    for module in list(model)[1:]:
                        features = module(features)
                np.save(f"{out}/{name}{suffix}.npy", features["sentence_embedding"].numpy())
            del optimum
        json.dump(files, open(f"{out}/files.json", "w"))
        print(folder, type(model[0].auto_model).__name__)
        del model
    """)
RESULTS = ("st", "st_query", "optimum", "optimum_query", "optimum_subfolder", "optimum_subfolder_query")


def run_child(venv, root, script: str, job: dict, timeout: int):
    """``script`` run by the venv's python in ``root`` on ``job`` (root/job.json); its CompletedProcess."""
    (root / "job.json").write_text(json.dumps(job))
    (root / "child.py").write_text(script)
    return run_ok([venv / "bin" / "python", root / "child.py", root / "job.json"], timeout=timeout,
                  env=isolated_env(venv), cwd=root)


def run_loaders(venv, root, exports: dict, texts: list[str] = TEXTS) -> dict:
    """CHILD over ``exports`` (key -> folder) in one run on ``texts``: key -> (folder, {result name: vectors},
    {loader: the model file it loaded, relative to the folder})."""
    outs = {key: root / f"out-{index}" for index, key in enumerate(exports)}
    job = {"library": customops.library_path(), "texts": texts,
           "exports": [{"folder": str(folder), "custom_ops": Manifest.read(folder).needs_custom_ops,
                        "out": str(outs[key])} for key, folder in exports.items()]}
    res = run_child(venv, root, CHILD, job, timeout=1800)
    # the loaders really were optimum's: sentence-transformers' Transformer module holds an ORTModel
    assert res.stdout.count("ORTModelForFeatureExtraction") == len(exports), res.stdout
    return {key: (folder, {name: np.load(outs[key] / f"{name}.npy") for name in RESULTS},
                  json.loads((outs[key] / "files.json").read_text())) for key, folder in exports.items()}


def check_loaders(folder, got, files, query_prompt: bool = True, texts: list[str] = TEXTS):
    """Every loader of CHILD gave Embedder.encode's vectors; the plain calls loaded the top-level model.onnx
    (optimum lists the folder's own files before onnx/'s and takes the first of the two model.onnx),
    subfolder="onnx" the layout's. ``query_prompt``: the export has a query prompt, which changes the
    vectors (so the loaders' query checks mean something); else it has none (as from a GGUF) and the
    loaders' query call gives the plain vectors. ``texts``: run_loaders' texts."""
    assert files == {"st": MODEL_NAME, "optimum": MODEL_NAME, "optimum_subfolder": HF_MODEL_FILE}, files
    embedder = Embedder(folder, threads=1)
    plain = embedder.encode(texts, prompt="")
    assert ("query" in embedder.prompts) == query_prompt, embedder.prompts
    query = embedder.encode(texts, prompt_name="query") if query_prompt else plain
    if query_prompt:
        assert not np.allclose(plain, query, atol=1e-3)
    # both take the export's default prompt, if any (with none, encode's vectors are the plain ones: an
    # encode fewer, seconds at the real widths)
    default = embedder.encode(texts) if embedder.manifest.default_prompt_name else plain
    assert_same_vectors(got["st"], default)
    assert_same_vectors(got["st_query"], query)
    for name in ("optimum", "optimum_subfolder"):
        assert_same_vectors(got[name], plain)
        assert_same_vectors(got[f"{name}_query"], query)
