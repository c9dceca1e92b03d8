"""HF model folder -> exported ONNX folder (model.onnx, tokenizer files, bitnet_onnx.json)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import onnx
from packaging.version import Version

from bitnet_onnx import customops
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import DEFAULT_FLOAT, DEFAULT_TERNARY, FORMATS, weight_format
from bitnet_onnx.io import read_json_object
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.model_source import ModelSource
from bitnet_onnx.precision import FLOAT32, get_precision, ranges_for
from bitnet_onnx.st_modules import StModules
from bitnet_onnx.tokenizer_json import TOKENIZER_JSON, TokenizerJson, read_tokenizer_json
from bitnet_onnx.weights import open_source
from bitnet_onnx.export import attention
from bitnet_onnx.export.memory import choose_attention, cost_fields
from bitnet_onnx.export.graph import build_model
from bitnet_onnx.export.hf_layout import LAYOUTS, add_hf_layout
from bitnet_onnx.export.text_input import text_input_for
from bitnet_onnx.export.writer import WeightFile, check_output, export_folder, write_folder

log = logging.getLogger("bitnet_onnx")

NBITS_CHOICES = FORMATS["nbits"].bits


def choose_variant(folder: ModelSource, weights: str | None, ternarize: bool) -> str:
    if ternarize and folder.is_bitnet:
        raise BitnetOnnxError(f"{folder.path}: --ternarize is for standard models; this one is already BitNet")
    variant = weights or (DEFAULT_TERNARY if folder.is_bitnet or ternarize else DEFAULT_FLOAT)
    if weight_format(variant).ternary_only and not (folder.is_bitnet or ternarize):
        raise BitnetOnnxError(f"{folder.path}: is a standard (non-BitNet) model, it has no per-projection norms; "
                              f"--weights {variant} needs a BitNet model, or --ternarize for a speed stand-in")
    return variant


def _token_id(tok, value) -> int | None:
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str):
        return None
    return tok.token_to_id(value)


def read_source_tokenizer(folder: ModelSource) -> TokenizerJson:
    """The source's tokenizer.json, parsed once for the whole export (tokenizer_facts, --text-input)."""
    tok_file = folder.tokenizer_dir / TOKENIZER_JSON
    if not os.path.lexists(tok_file):
        raise BitnetOnnxError(f"{folder.path}: tokenizer.json is missing (the exported folder needs it)")
    return read_tokenizer_json(tok_file)


def tokenizer_facts(folder: ModelSource, parsed: TokenizerJson | None = None) -> dict:
    """pad id, padding side and the EOS id of the arch's append rule, from the tokenizer files;
    ``parsed``: ``read_source_tokenizer(folder)`` when the caller has it."""
    parsed = parsed or read_source_tokenizer(folder)
    tok, tok_file = parsed.library, parsed.path
    top = max(tok.get_vocab(with_added_tokens=True).values(), default=-1)
    if top >= folder.cfg.vocab:  # the graph's Gather would fail on it at run time
        raise BitnetOnnxError(f"{tok_file}: token id {top} is not below the model's vocab_size {folder.cfg.vocab} "
                              "(the embedding has no row for it)")
    cfg_file = folder.tokenizer_dir / "tokenizer_config.json"
    tcfg = read_json_object(cfg_file) if os.path.lexists(cfg_file) else {}
    eos_id = None
    if folder.arch.append_eos:
        eos_id = tok.token_to_id(folder.arch.append_eos)
        if eos_id is None:
            raise BitnetOnnxError(f"{tok_file}: has no token {folder.arch.append_eos!r}, which {folder.arch.name} "
                                  "appends to every text for last-token pooling")
    pad_id = _token_id(tok, tcfg.get("pad_token"))
    if pad_id is None:
        pad_id = folder.config.get("pad_token_id")
    if pad_id is None:
        pad_id = eos_id if eos_id is not None else 0  # any id: padded positions are masked
    side = tcfg.get("padding_side", "right")
    model_max = tcfg.get("model_max_length")
    return {"pad_token_id": int(pad_id), "padding_side": side if side in ("left", "right") else "right",
            "append_eos_token_id": eos_id, "model_max_length": model_max}


def source_max_length(folder: ModelSource, st: StModules, tf: dict) -> int:
    """Tokens per text the source states (sentence-transformers, else the tokenizer), at most its positions."""
    cfg = folder.cfg
    max_length = st.max_seq_length
    if not max_length and isinstance(tf["model_max_length"], int) and 0 < tf["model_max_length"] < 10**7:
        max_length = tf["model_max_length"]
    return min(int(max_length or cfg.max_positions), cfg.max_positions)


def make_manifest(folder: ModelSource, st: StModules, tf: dict, variant: str, bits: int, ternarize: bool,
                  attention_name: str, custom_ops: list[str], max_length: int) -> Manifest:
    """``tf``: tokenizer_facts(folder); ``max_length``: what the attention serves (choose_attention)."""
    cfg, fmt = folder.cfg, FORMATS[variant]
    return Manifest(
        arch=cfg.arch.name, weights=variant, pooling=st.pooling, normalize=st.normalize,
        dimension=st.dimension or cfg.hidden, hidden_size=cfg.hidden, max_length=max_length,
        padding_side=tf["padding_side"], pad_token_id=tf["pad_token_id"],
        append_eos_token_id=tf["append_eos_token_id"], prompts=dict(st.prompts),
        default_prompt_name=st.default_prompt_name, nbits=bits if fmt.bits else None,
        min_onnxruntime=min_onnxruntime(variant, bits, attention_name),
        ternarized=ternarize, attention=attention_name, custom_ops=custom_ops, needs_custom_ops=bool(custom_ops),
        source_model=folder.path.resolve().name, **cost_fields(cfg, attention_name),
    )


def min_onnxruntime(variant: str, bits: int, attention_name: str) -> str:
    """The newer of the weight format's ORT floor and the attention strategy's."""
    floors = [FORMATS[variant].min_onnxruntime(bits), attention.STRATEGIES[attention_name].min_onnxruntime]
    return max((f for f in floors if f), key=Version)


def output_ranges_for(precision: str, given, width: int, layout: str):
    """The checked ranges ``--output-precision`` bakes in (None for the precisions without), or an error."""
    record = get_precision(precision, "--output-precision")
    if record.name != FLOAT32 and layout == "hf":
        raise BitnetOnnxError(f"--output-precision {record.name} and --layout hf: sentence-transformers and optimum "
                              "read float32 outputs; export one float32 folder for them")
    if not record.needs_ranges:
        return None
    ranges = ranges_for(width, given, None)
    if ranges is None:
        raise BitnetOnnxError(f"--output-precision {record.name} needs --output-ranges FILE (ranges of width {width} "
                              "from 'bitnet-onnx calibrate' on a float32 export of the same model)")
    return ranges


def custom_ops_used(model: onnx.ModelProto) -> list[str]:
    """The op types of our library's domain that the graph uses (recorded in the manifest)."""
    return sorted({n.op_type for n in model.graph.node if n.domain == customops.DOMAIN})


def export(model_dir: str | Path, out_dir: str | Path, arch: str | None = None, weights: str | None = None,
           bits: int = 4, ternarize: bool = False, overwrite: bool = False, attention_name: str | None = None,
           pooling: str | None = None, text_input: bool = False, layout: str = "bitnet",
           output_precision: str = FLOAT32, output_ranges=None, attention_precision: str | None = None) -> Path:
    """Export ``model_dir`` (a HF folder or a GGUF file) to ``out_dir``; returns the folder.

    ``pooling`` fills in for a source that names none. ``text_input`` also writes model_text.onnx,
    strings in (the tokenizer in the graph, export/text_input.py). ``layout`` "hf" also writes the
    sentence-transformers / optimum / fastembed files (export/hf_layout.py, docs/integrations.md).
    ``output_precision`` (bitnet_onnx.precision) quantizes sentence_embedding in the graph, int8 / uint8
    by ``output_ranges`` (an array [2, dimension] or a calibration file's path). ``attention_precision``
    (f32 / bf16 / auto; None: the default for the strategy, export/attention.py) is what the fused attention op's
    q.k and p.v multiply. Raises BitnetOnnxError on bad input.
    """
    if layout not in LAYOUTS:
        raise BitnetOnnxError(f"--layout {layout!r}: choose {' or '.join(LAYOUTS)}")
    if bits not in NBITS_CHOICES:
        raise BitnetOnnxError(f"--nbits {bits} is not supported; choose {' or '.join(map(str, NBITS_CHOICES))}")
    out_dir = Path(out_dir)
    check_output(out_dir, [model_dir], overwrite)  # before the slow part
    start = time.perf_counter()
    folder = open_source(model_dir, arch, check_pooling=True, pooling=pooling)  # --pooling before any weights
    variant = choose_variant(folder, weights, ternarize)
    st = folder.st_modules(pooling)
    parsed = read_source_tokenizer(folder)  # once: the facts, then --text-input's graph
    tf = tokenizer_facts(folder, parsed)  # before the slow part: a bad tokenizer fails fast
    if not text_input:
        parsed = None  # a large vocabulary's parse is hundreds of MB: not held through the model's build
    attention_name, max_length = choose_attention(attention_name, variant, folder.cfg, source_max_length(folder, st, tf))
    attention_precision = attention.choose_precision(attention_precision, attention_name)
    ranges = output_ranges_for(output_precision, output_ranges, st.dimension or folder.cfg.hidden, layout)
    with export_folder(out_dir, overwrite) as tmp:  # the weights are written into it as the graph is built
        with WeightFile(tmp) as weights:
            model, weight_bytes = build_model(folder, st, variant, bits, ternarize, attention_name, output_precision,
                                              ranges, attention_precision=attention_precision, weights=weights)
        weights.inline_if_small(weight_bytes)
        manifest = make_manifest(folder, st, tf, variant, bits, ternarize, attention_name, custom_ops_used(model),
                                 max_length)
        manifest.output_precision = output_precision
        manifest.attention_precision = attention_precision
        text_pre = text_input_for(parsed, manifest, model) if text_input else None
        parsed = None  # the graph holds what it needs of it
        add_files = (lambda dest: add_hf_layout(dest, manifest, model, folder.config, st)) if layout == "hf" else None
        write_folder(tmp, model, manifest, folder.tokenizer_dir, text_pre=text_pre, add_files=add_files)
    log.info("exported %s (%s, %s, attention %s %s) to %s in %.1f s", folder.path, folder.arch.name, variant,
             attention_name, attention_precision, out_dir,
             time.perf_counter() - start)
    return out_dir
