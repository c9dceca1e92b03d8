"""An exported folder as this host would run it (the `inspect` verb prints it): the manifest's facts, then
the onnxruntime, op library, kernel ISA and family, and EncoderAttention precision a session here gets.

Every host fact comes from the entry point the session itself goes through (``customops.library_path``,
``selected_isa``, ``selected_kernel_family``, ``attention_auto_precision``: the library's own tables and
rules under this process's environment), so an environment variable the session would refuse fails here
with the same one line. An export that needs no op library never loads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from bitnet_onnx import customops
from bitnet_onnx.customops import i2s_matmul
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.session import runs_on_onnxruntime


def describe_export(folder: str | Path) -> str:
    """The folder's manifest facts and what runs it on this host, as an aligned ``key: value`` block."""
    manifest = Manifest.read(Path(folder))
    export = _export_facts(manifest)
    host = _host_facts(manifest)
    width = max(len(key) for key, _ in export + host) + 2  # the longest "key:" and a space
    lines = [f"{folder}: exported by bitnet-onnx {manifest.package_version} (manifest format {manifest.format_version})"]
    lines += [f"  {key + ':':<{width}}{value}" for key, value in export]
    lines.append("this host:")
    lines += [f"  {key + ':':<{width}}{value}" for key, value in host]
    return "\n".join(lines)


def _export_facts(manifest: Manifest) -> list[tuple[str, str]]:
    """What the exporter chose, as the manifest records it."""
    weights = manifest.weights + (f" ({manifest.nbits} bits)" if manifest.nbits else "")
    weights += ", ternarized" if manifest.ternarized else ""
    embedding = (f"{manifest.dimension} dims, {manifest.pooling} pooling, "
                 f"{'normalized' if manifest.normalize else 'not normalized'}, {manifest.output_precision}")
    facts = [("source", manifest.source_model)] if manifest.source_model else []
    facts += [("arch", manifest.arch), ("weights", weights),
              ("attention", f"{manifest.attention}, precision {manifest.attention_precision}"),
              ("max_length", f"{manifest.max_length} tokens"), ("embedding", embedding),
              ("custom ops", ", ".join(manifest.custom_ops) or "none (stock onnxruntime ops only)")]
    if manifest.text_model_file:  # export --text-input: the strings-in graph has libraries of its own
        needs = manifest.text_custom_ops + (["onnxruntime-extensions"] if manifest.text_needs_extensions else [])
        facts.append(("text input", f"{manifest.text_model_file}" + (f" ({', '.join(needs)})" if needs else "")))
    facts.append(("needs onnxruntime", f">= {manifest.min_onnxruntime}"))
    return facts


def _host_facts(manifest: Manifest) -> list[tuple[str, str]]:
    """What a session on this folder gets in this process: onnxruntime, then (only where the export uses the
    op library) the library, the kernel ISA and family, and what the fused attention multiplies in."""
    import onnxruntime

    have = onnxruntime.__version__
    facts = [("onnxruntime", have if runs_on_onnxruntime(have, manifest.min_onnxruntime)
              else f"{have} (too old: the export needs >= {manifest.min_onnxruntime})")]
    if not manifest.needs_op_library(text=bool(manifest.text_model_file)):
        return facts + [("op library", "not needed (no bitnet_onnx custom ops)")]
    facts.append(("op library", customops.library_path()))
    if not manifest.needs_custom_ops:  # only the strings-in graph's tokenizer ops: no ISA, no attention
        return facts
    facts.append(("kernel ISA", customops.selected_isa() + _chosen(customops.ISA_ENV, "the best this build and CPU run")))
    if i2s_matmul.NAME in manifest.custom_ops:
        facts.append(("kernel family",
                      customops.selected_kernel_family()
                      + _chosen(customops.KERNEL_ENV, "timed on this host's first calls of each shape")))
    if manifest.attention == "fused":
        facts.append(("attention precision", _attention_precision(manifest.attention_precision)))
    return facts


def _attention_precision(exported: str) -> str:
    """What EncoderAttention multiplies in here: an explicit f32 or bf16 as exported, auto as the library
    resolves it (BITNET_ONNX_ATTENTION_PRECISION is read by auto nodes only)."""
    if exported != "auto":
        return f"{exported} (as exported)"
    return (f"auto -> {customops.attention_auto_precision()}"
            + _chosen(customops.ATTENTION_PRECISION_ENV, "the op library's choice here"))


def _chosen(variable: str, default_reason: str) -> str:
    """Why a value is what it is: forced by ``variable`` when it is set (the library treats an empty value
    as unset), else ``default_reason``."""
    forced = os.environ.get(variable)
    return f" (forced by {variable}={forced})" if forced else f" ({default_reason})"
