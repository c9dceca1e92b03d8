"""Upstream llama.cpp as bench variants, through llama-cpp-python (when installed).

``llama.cpp-f16``: the model converted by ``convert-gguf --outtype f16`` without BitNet's
per-projection norms (upstream llama.cpp has no place for them): a standard model of the same
shapes, timed as llama.cpp runs it. ``llama.cpp-tq2_0``: that file quantized by llama.cpp's own
quantizer to TQ2_0, its fastest ternary type (2 bits per weight, 256-value blocks; TQ1_0 packs
tighter and runs slower). The numbers differ from the BitNet model's; the speed is comparable,
the shapes being the same.
"""

from __future__ import annotations

from pathlib import Path

from bitnet_onnx.errors import BitnetOnnxError

GGUF_NAME = "model.gguf"
QUANT_TYPES = {"tq2_0": "LLAMA_FTYPE_MOSTLY_TQ2_0", "tq1_0": "LLAMA_FTYPE_MOSTLY_TQ1_0"}


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise BitnetOnnxError("the llama.cpp variants need llama-cpp-python (pip install llama-cpp-python; "
                              "it builds llama.cpp from source)") from None
    return llama_cpp


# llama.cpp's pre-tokenizer for each arch's byte-level BPE: the bench times the model, not the
# tokenizer, and the factory's trained tokenizers have no hash llama.cpp knows.
PRE_TOKENIZERS = {"qwen3": "qwen2"}


def build_f16(model_dir: Path, out_dir: Path) -> Path:
    from bitnet_onnx.convert_gguf.writer import convert
    from bitnet_onnx.weights import open_model

    _llama_cpp()  # fail before the conversion when the runner cannot run
    out_dir.mkdir(parents=True)
    pre = PRE_TOKENIZERS.get(open_model(model_dir).arch.name)
    convert(model_dir, out_dir / GGUF_NAME, "f16", pre_tokenizer=pre, progress=False, bitnet_norms=False)
    return out_dir


def build_quantized(model_dir: Path, out_dir: Path, quant: str) -> Path:
    """The f16 file, quantized by llama.cpp's llama_model_quantize to ``quant``."""
    llama_cpp = _llama_cpp()
    staging = out_dir.with_name(out_dir.name + ".f16")
    build_f16(model_dir, staging)
    out_dir.mkdir(parents=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[quant])
    source, target = staging / GGUF_NAME, out_dir / GGUF_NAME
    try:
        if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) != 0:
            raise BitnetOnnxError(f"{source}: llama.cpp could not quantize it to {quant.upper()}")
    finally:
        source.unlink()
        staging.rmdir()
    return out_dir


def loader():
    """The worker side (worker.Runner.loader): load(folder, threads) -> job(batch, seq) -> a call to time."""
    import numpy as np

    llama_cpp = _llama_cpp()
    from llama_cpp._internals import LlamaBatch

    from bitnet_onnx.bench.worker import SAMPLE_TEXT

    def load(folder: Path, threads: int):
        model = folder / GGUF_NAME
        if not model.is_file():
            raise BitnetOnnxError(f"{folder}: no {GGUF_NAME}")

        def context(tokens: int):  # one context holds a whole batch; the weights are loaded here
            return llama_cpp.Llama(model_path=str(model), embedding=True, n_ctx=tokens, n_batch=tokens,
                                   n_ubatch=tokens, n_threads=threads, n_threads_batch=threads, verbose=False)

        state = {"llm": context(512)}

        def job(batch: int, seq: int):
            tokens = batch * seq
            if state["llm"].n_batch < tokens:  # widen the context for a larger batch
                state["llm"].close()
                state["llm"] = context(tokens)
            llm = state["llm"]
            sample = llm.tokenize(SAMPLE_TEXT.encode("utf-8"), add_bos=False, special=False)
            ids = [int(t) for t in np.resize(np.asarray(sample), seq)]
            work = LlamaBatch(n_tokens=tokens, embd=0, n_seq_max=batch, verbose=False)
            for s in range(batch):
                work.add_sequence(ids, s, True)

            def run():
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
                if llama_cpp.llama_decode(llm.ctx, work.batch) != 0:
                    raise BitnetOnnxError(f"{model}: llama_decode failed for batch {batch} x {seq}")
                return [llama_cpp.llama_get_embeddings_seq(llm.ctx, s)[0] for s in range(batch)]

            return run

        return job

    return load


def facts(folder: Path) -> dict:
    """The parent side (worker.Runner.facts): the file's size and its attention (llama.cpp's own)."""
    return {"file_bytes": (folder / GGUF_NAME).stat().st_size, "attention": "llama.cpp"}
