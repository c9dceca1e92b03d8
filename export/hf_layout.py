"""The sentence-transformers / optimum folder layout inside an export folder (``export --layout hf``).

Next to our own files (model.onnx, bitnet_onnx.json, the tokenizer) the layout adds what those
libraries read, so ``SentenceTransformer(OUT, backend="onnx", model_kwargs={"session_options": ...})``,
optimum's ``ORTModelForFeatureExtraction.from_pretrained(OUT, session_options=...)`` and fastembed's
local-model path load the folder with their own code (docs/integrations.md):

- ``onnx/model.onnx``: the same graph cut to its ``last_hidden_state`` output (the token embeddings
  after the final norm), inputs ``input_ids`` / ``attention_mask`` (what optimum feeds); pooling,
  Dense and Normalize are the libraries' own modules below. The top-level model.onnx has the same
  ``last_hidden_state`` output (export/graph.py): optimum finds two files named model.onnx, warns and
  takes one of them (the top-level one, as glob lists them), and either gives the same tensor, so
  neither ``file_name`` nor ``subfolder`` is needed. Weights the export keeps in external data are on
  disk once: the export's ``model.onnx.data`` moves to ``onnx/model.onnx_data`` (the one name optimum
  fetches with a model), which ``onnx/model.onnx`` names beside it and the top-level graphs
  (model.onnx, model_text.onnx) name as ``onnx/model.onnx_data``, the same offsets in the same file
  (move_weights_into_layout). onnx.checker refuses a hard-linked data file and a location leading up
  out of ``onnx/``; a location down into it is fine, and ONNX Runtime reads it relative to the graph.
- ``config.json`` (the source's, for transformers' AutoConfig), ``modules.json``, ``1_Pooling/``,
  ``N_Dense/`` (the source's Dense layers as safetensors), ``N_Normalize/``,
  ``config_sentence_transformers.json`` (prompts), ``sentence_bert_config.json`` (max length).
- ``tokenizer.json`` gains the architecture's EOS rule (Qwen3 appends ``<|endoftext|>``) as a
  post-processor, so every tokenizer.json reader (transformers, fastembed) appends it as our
  runtime does, and the manifest's max length as its ``truncation`` (a reader of that file alone
  cuts the text and keeps the special tokens, as transformers and our runtime do); ``tokenizer_config.json`` gets the manifest's pad token, side and max length.
  The runtime's own ids do not change (it re-appends the EOS it finds last).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import MAX_TOKENIZER_JSON_BYTES, check_input_file, read_json_object, replace_together
from bitnet_onnx.manifest import (
    EXTERNAL_DATA_FILES, EXTERNAL_DATA_NAME, HF_EXTERNAL_DATA_FILE, HF_EXTERNAL_DATA_NAME, HF_MODEL_FILE,
    LAST_HIDDEN_STATE, MODEL_NAME, Manifest,
)
from bitnet_onnx.st_modules import DENSE_ACTIVATIONS, POOLING_FLAGS, UNSUPPORTED_POOLING_FLAGS, StModules
from bitnet_onnx.export.writer import EXTERNAL_DATA_THRESHOLD, check_model

LAYOUTS = ("bitnet", "hf")  # export --layout: our files only, or these added
HF_INPUTS = ("input_ids", "attention_mask")
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
# short activation name -> the torch class path sentence-transformers' Dense config names
DENSE_ACTIVATION_PATHS = {short: path for path, short in reversed(list(DENSE_ACTIVATIONS.items()))}


def token_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` cut to what its ``last_hidden_state`` output needs (the same tensor as the top-level
    graph's, by construction: the same nodes and weights).

    The pooling, Dense and normalize nodes (and a ``prompt_length`` input) fall away. The kept
    weights are copied once (``model`` is left as it is).
    """
    graph = model.graph
    if LAST_HIDDEN_STATE not in {o.name for o in graph.output}:
        # an export from before the top-level graph had it: the layout cannot be added after the fact
        raise BitnetOnnxError(f"{MODEL_NAME}: graph has no {LAST_HIDDEN_STATE!r} output; export the model again "
                              f"with this bitnet-onnx")
    needed = {LAST_HIDDEN_STATE}
    kept = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
            needed.update(_subgraph_inputs(node))
    missing = [name for name in HF_INPUTS if name not in needed or name not in {i.name for i in graph.input}]
    if missing:
        raise BitnetOnnxError(f"{MODEL_NAME}: {LAST_HIDDEN_STATE} does not depend on graph input(s) "
                              f"{', '.join(missing)}")
    out = _without_graph(model)
    out.graph.name, out.graph.doc_string = graph.name, graph.doc_string
    out.graph.node.extend(reversed(kept))
    out.graph.input.extend(i for i in graph.input if i.name in needed)
    out.graph.initializer.extend(t for t in graph.initializer if t.name in needed)
    out.graph.value_info.extend(v for v in graph.value_info if v.name in needed and v.name != LAST_HIDDEN_STATE)
    out.graph.output.extend(o for o in graph.output if o.name == LAST_HIDDEN_STATE)
    return out


def _without_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of every field of ``model`` but its graph (opsets, IR version, functions, metadata),
    without copying the weights that token_model leaves out."""
    out = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == "graph":
            continue
        # protobuf >= 6 has is_repeated (7 dropped label); older ones only label
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(out, field.name).extend(value)
        elif field.message_type is not None:
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    return out


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Outer-scope names a control-flow node's subgraphs read (none in today's graphs; kept correct)."""
    names: set[str] = set()
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            names.update(i for n in sub.node for i in n.input if i)
    return names


def add_hf_layout(folder: Path, manifest: Manifest, model: onnx.ModelProto, config: dict, st: StModules) -> None:
    """Writes the layout's files into ``folder``, which already holds the export's own files (the
    tokenizer among them). ``model``: the exported graph; ``config``: the source's config.json (or a
    GGUF's equivalent); ``st``: the source's sentence-transformers modules, as exported."""
    folder = Path(folder)
    if manifest.arch not in ARCHITECTURES:
        raise BitnetOnnxError(f"{folder}: manifest arch {manifest.arch!r} is not one of {', '.join(ARCHITECTURES)}")
    move_weights_into_layout(folder, model, manifest)
    save_token_model(token_model(model), folder, manifest.needs_custom_ops)
    config = dict(config)
    config.setdefault("model_type", ARCHITECTURES[manifest.arch].model_types[0])
    _write_json(folder / "config.json", config)
    _write_json(folder / "modules.json", write_st_modules(folder, manifest, st))
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": {"bitnet_onnx": manifest.package_version}, "prompts": dict(manifest.prompts),
        "default_prompt_name": manifest.default_prompt_name, "similarity_fn_name": "cosine",
        "model_type": "SentenceTransformer"})
    _write_json(folder / "sentence_bert_config.json", {"max_seq_length": int(manifest.max_length),
                                                       "do_lower_case": False})
    tok = add_eos_rule(folder / "tokenizer.json", manifest)
    update_tokenizer_config(folder / "tokenizer_config.json", folder / "tokenizer.json", tok, manifest)


def move_weights_into_layout(folder: Path, model: onnx.ModelProto, manifest: Manifest) -> None:
    """Moves the export's external data file (model.onnx.data) to onnx/model.onnx_data and points the
    folder's graphs at it (``model``, the top-level graph as held in memory, changes with its file), so
    that one file serves model.onnx, model_text.onnx and the layout's onnx/model.onnx. Nothing to do
    when the weights are inside the graph or already moved.

    The rewritten graphs are written beside their files first; then the data file and they are
    renamed in one step that Ctrl-C does not split (io.replace_together). Should a rename fail
    between two others, a graph still naming model.onnx.data after the data moved to onnx/ is
    rewritten when this runs again (write_hf_layout)."""
    graphs = {folder / MODEL_NAME: model}
    if manifest.text_model_file:
        text_path = folder / manifest.text_model_file
        graphs[text_path] = onnx.load(str(check_input_file(text_path)), load_external_data=False)
    stale = {path: graph for path, graph in graphs.items() if _data_file(graph, path) == EXTERNAL_DATA_NAME}
    if not stale:
        return
    source, target = folder / EXTERNAL_DATA_NAME, folder / HF_EXTERNAL_DATA_FILE
    moves = []
    if os.path.lexists(source):
        moves.append((check_input_file(source), target))
    else:  # moved by an earlier, interrupted run
        check_input_file(target, missing=f" (the external data of {MODEL_NAME}), nor is {source.name} there")
    target.parent.mkdir(exist_ok=True)
    rewritten = []
    try:
        for path, graph in stale.items():
            _point_at(graph, HF_EXTERNAL_DATA_FILE)
            rewritten.append((_save_beside(graph, path), path))
        replace_together(moves + rewritten)
    finally:
        for tmp, _ in rewritten:
            tmp.unlink(missing_ok=True)
    for path in stale:
        check_model(path, manifest.needs_op_library(text=path != folder / MODEL_NAME))


def _save_beside(model: onnx.ModelProto, path: Path) -> Path:
    """``model`` saved to a temp name in ``path``'s folder (one name per file: a leftover of an
    interrupted run is overwritten, not added to)."""
    tmp = path.with_name(f".{path.name}.layout.tmp")
    onnx.save_model(model, str(tmp))
    return tmp


def save_token_model(model: onnx.ModelProto, folder: Path, uses_custom_op: bool) -> Path:
    """Writes ``model`` (token_model's) as ``onnx/model.onnx``. The token model's tensors are a subset
    of the export's, so weights the export keeps in external data are read where they are, at the
    same offsets: from onnx/model.onnx_data beside it (move_weights_into_layout put the export's one
    data file there). Weights still in memory go to external data of their own past the threshold."""
    path = folder / HF_MODEL_FILE
    path.parent.mkdir(exist_ok=True)
    if _data_file(model, folder / MODEL_NAME) is not None:
        _point_at(model, HF_EXTERNAL_DATA_NAME)  # the same file, named from onnx/
        onnx.save_model(model, str(path))
    elif sum(_tensor_bytes(t) for t in model.graph.initializer) > EXTERNAL_DATA_THRESHOLD:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=HF_EXTERNAL_DATA_NAME, size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
    check_model(path, uses_custom_op)
    return path


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def _data_file(model: onnx.ModelProto, path: Path) -> str | None:
    """The one file, relative to the export folder, that ``model`` (read from ``path``) keeps its
    external tensors in: one of the names the export gives it; None when every tensor is inline."""
    files = {_location(t, path).value for t in _external_tensors(model)}
    if len(files) > 1 or not files <= set(EXTERNAL_DATA_FILES):
        raise BitnetOnnxError(f"{path}: keeps its weights in {', '.join(sorted(files))}, not in one of the "
                              f"files an export writes ({' or '.join(EXTERNAL_DATA_FILES)})")
    return next(iter(files), None)


def _location(tensor: onnx.TensorProto, path: Path):
    entry = next((e for e in tensor.external_data if e.key == "location"), None)
    if entry is None:
        raise BitnetOnnxError(f"{path}: tensor {tensor.name!r} is marked external but names no file")
    return entry


def _point_at(model: onnx.ModelProto, location: str) -> None:
    """Every external tensor of ``model`` read from ``location`` (relative to the graph file's folder)."""
    for tensor in _external_tensors(model):  # each names its file (_data_file checked it)
        next(e for e in tensor.external_data if e.key == "location").value = location


def _tensor_bytes(t: onnx.TensorProto) -> int:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return int(next((e.value for e in t.external_data if e.key == "length"), 0))
    return t.ByteSize()


def write_st_modules(folder: Path, manifest: Manifest, st: StModules) -> list[dict]:
    """Pooling, Dense and Normalize module folders as sentence-transformers saves them; returns modules.json."""
    if st.pooling != manifest.pooling or st.normalize != manifest.normalize:
        raise BitnetOnnxError(f"{folder}: the source's modules (pooling {st.pooling}, normalize {st.normalize}) "
                              f"differ from the export's manifest ({manifest.pooling}, {manifest.normalize})")
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER}]

    def add(kind: str, path: str) -> None:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": path,
                        "type": f"sentence_transformers.models.{kind}"})

    flags = {flag: POOLING_FLAGS[st.pooling] == flag for flag in (*POOLING_FLAGS.values(), *UNSUPPORTED_POOLING_FLAGS)}
    _write_json(folder / "1_Pooling" / "config.json", {"word_embedding_dimension": int(manifest.hidden_size),
                                                       **flags, "include_prompt": bool(st.include_prompt)})
    add("Pooling", "1_Pooling")
    for layer in st.dense:
        path = f"{len(modules)}_Dense"
        write_dense(folder / path, layer)
        add("Dense", path)
    if st.normalize:
        path = f"{len(modules)}_Normalize"
        (folder / path).mkdir(exist_ok=True)
        add("Normalize", path)
    return modules


def write_dense(path: Path, layer) -> None:
    """One ``st_modules.DenseLayer`` as sentence-transformers' Dense folder (config.json + model.safetensors)."""
    import safetensors.numpy

    out_features, in_features = layer.weight.shape
    _write_json(path / "config.json", {"in_features": int(in_features), "out_features": int(out_features),
                                       "bias": layer.bias is not None,
                                       "activation_function": DENSE_ACTIVATION_PATHS[layer.activation]})
    tensors = {"linear.weight": np.ascontiguousarray(layer.weight, dtype=np.float32)}
    if layer.bias is not None:
        tensors["linear.bias"] = np.ascontiguousarray(layer.bias, dtype=np.float32)
    safetensors.numpy.save_file(tensors, str(path / "model.safetensors"))


def add_eos_rule(tokenizer_file: Path, manifest: Manifest):
    """Makes tokenizer.json append the manifest's EOS (when it has one and the file does not already)
    and truncate to the manifest's max_length, so a reader of the file alone (the ``tokenizers``
    library, fastembed) cuts an over-long text as our runtime does: the text's ids to max_length less
    the special tokens, which stay (bitnet_onnx.special_tokens). Returns the file's
    ``tokenizers.Tokenizer``, as written."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(str(check_input_file(tokenizer_file, limit=MAX_TOKENIZER_JSON_BYTES)))
    eos_id = manifest.append_eos_token_id
    if eos_id is not None and tok.encode("a", add_special_tokens=True).ids[-1:] != [eos_id]:
        eos = tok.id_to_token(eos_id)
        if eos is None:
            raise BitnetOnnxError(f"{tokenizer_file}: has no token with the manifest's append_eos_token_id {eos_id}")
        template = processors.TemplateProcessing(single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
                                                 special_tokens=[(eos, eos_id)])
        tok.post_processor = template if tok.post_processor is None else processors.Sequence([tok.post_processor,
                                                                                              template])
    # the library's own truncation is transformers' rule: the post-processor's tokens are kept
    tok.enable_truncation(max_length=int(manifest.max_length))
    # compact: the library's default (pretty) indents every vocabulary entry and merge, which took the
    # released Gemma3 tokenizer.json from 16 to 33 MB, more than the layout's graph and weights-free files
    tok.save(str(tokenizer_file), pretty=False)
    return tok


def update_tokenizer_config(config_file: Path, tokenizer_file: Path, tok, manifest: Manifest) -> None:
    """The manifest's pad token, padding side and max length in tokenizer_config.json (fastembed needs a
    pad token; transformers and fastembed truncate at model_max_length). ``tok``: ``tokenizer_file``
    in the ``tokenizers`` library (``add_eos_rule``'s)."""
    config = read_json_object(config_file) if os.path.lexists(config_file) else {}
    pad = tok.id_to_token(manifest.pad_token_id)
    if pad is None:
        raise BitnetOnnxError(f"{tokenizer_file}: has no token with the manifest's pad_token_id {manifest.pad_token_id}")
    config.update(pad_token=pad, padding_side=manifest.padding_side, model_max_length=int(manifest.max_length))
    _write_json(config_file, config)


def write_hf_layout(export_dir: str | Path, source: str | Path) -> Path:
    """Adds the layout to an export folder already written from ``source`` (its HF folder or GGUF
    file): the same as ``export --layout hf``, after the fact. Returns ``export_dir``."""
    from bitnet_onnx.weights import open_source

    export_dir = Path(export_dir)
    manifest = Manifest.read(export_dir)
    folder = open_source(source, manifest.arch)
    st = folder.st_modules(manifest.pooling)
    model = onnx.load(str(export_dir / manifest.model_file), load_external_data=False)  # shared, not read
    add_hf_layout(export_dir, manifest, model, folder.config, st)
    return export_dir


def _write_json(file: Path, data) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
