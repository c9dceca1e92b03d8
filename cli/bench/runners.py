"""How a bench worker runs each kind of built folder: one ``Runner`` per ``Variant.runner`` name.

A runner is a loader factory, called in the worker process (it imports what the runner needs, counted
in the base RSS like any host process, and returns load(folder, threads, trace_prefix) -> a ``Loaded``,
whose job(batch, seq) is a call to time), and a facts function, called in the parent (the folder's
"file_bytes" and the header facts of ``report.header``). Every job feeds a full batch of ``seq`` real
tokens, no padding. Runners of ONNX Runtime sessions (``profiles``) also load a folder with ORT's
profiler on (``bench --profile``: a trace_prefix), into a session of its own, never the timed one.
A runner whose package is an optional install says why it cannot run (``missing``; ``unavailable``
asks for a variant), so the bench can say so before it builds anything.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bitnet_onnx.bench import llama_cpp
from bitnet_onnx.bench.report import export_facts
from bitnet_onnx.bench.variants import variant
from bitnet_onnx.errors import BitnetOnnxError

# Repeated to each asked length: real token ids (the manifest's max_length does not bound a bench).
SAMPLE_TEXT = ("Ternary weights take the values minus one, zero and plus one; activations are eight-bit "
               "integers. Search queries and documents are embedded into the same space and compared by "
               "cosine similarity. The quick brown fox jumps over the lazy dog.")

Job = Callable[[], object]


@dataclass(frozen=True)
class Loaded:
    """A variant loaded in a worker."""

    job: Callable[[int, int], Job]  # (batch, seq) -> one run of a full batch
    end_profiling: Callable[[], str] | None = None  # a profiling session's: ends it, returns ORT's trace file
    facts: dict = field(default_factory=dict)  # what only the loaded runtime knows, for the header (JSON-able)


Loader = Callable[[Path, int, "str | None"], Loaded]  # (folder, threads, trace prefix or None) -> Loaded


@dataclass(frozen=True)
class Runner:
    """How the bench runs one kind of built folder (``Variant.runner`` names one)."""

    loader: Callable[[], Loader]  # in the worker process
    facts: Callable[[Path], dict]  # in the parent: the folder's "file_bytes" and header facts (report.header)
    profiles: bool = False  # an ORT session: its loader takes a trace prefix (bench --profile)
    missing: Callable[[], str | None] = lambda: None  # why it cannot run on this install, or None


def _onnx_session(folder: Path, manifest, threads: int, text: bool, trace_prefix: str | None):
    """The timed session, or with a trace prefix the same session with ORT's profiler on."""
    from bitnet_onnx.runtime.session import create_session

    return create_session(folder, manifest, threads=threads, text=text, profile_prefix=trace_prefix)


def _sample_ids(folder: Path):
    """SAMPLE_TEXT's token ids by the export's tokenizer (int64)."""
    import numpy as np
    from tokenizers import Tokenizer

    from bitnet_onnx.runtime.tokenization import TOKENIZER_FILE

    return np.asarray(Tokenizer.from_file(str(folder / TOKENIZER_FILE)).encode(SAMPLE_TEXT).ids, dtype=np.int64)


def _ids_feed(sample, batch: int, seq: int) -> dict:
    """input_ids and attention_mask of ``batch`` texts of ``seq`` real tokens (``sample`` repeated)."""
    import numpy as np

    return {"input_ids": np.tile(np.resize(sample, seq), (batch, 1)),
            "attention_mask": np.ones((batch, seq), dtype=np.int64)}


def _onnx_loader() -> Loader:
    """An exported folder in an onnxruntime session, fed input_ids and attention_mask."""
    import onnxruntime  # noqa: F401

    from bitnet_onnx.manifest import Manifest
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT

    def load(folder: Path, threads: int, trace_prefix: str | None = None) -> Loaded:
        session = _onnx_session(folder, Manifest.read(folder), threads, False, trace_prefix)
        sample = _sample_ids(folder)

        def job(batch: int, seq: int) -> Job:
            feed = _ids_feed(sample, batch, seq)
            return lambda: session.run([SENTENCE_OUTPUT], feed)

        return Loaded(job, session.end_profiling if trace_prefix else None)

    return load


OPENVINO_INSTALL = "pip install 'bitnet-onnx[openvino]'"


def _openvino_missing() -> str | None:
    return None if importlib.util.find_spec("openvino") else f"openvino is not installed ({OPENVINO_INSTALL})"


def _openvino_loader() -> Loader:
    """An export of ONNX Runtime's own ops in OpenVINO's CPU runtime, fed like the onnx runner. OpenVINO's
    defaults but the thread count, so it multiplies at the precision it picks for this CPU (bf16 where
    it has AMX); the loaded runtime reports that precision (its INFERENCE_PRECISION_HINT) and version."""
    import openvino

    from bitnet_onnx.manifest import Manifest
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT

    def load(folder: Path, threads: int, trace_prefix: str | None = None) -> Loaded:
        if trace_prefix is not None:  # Runner.profiles is False: the bench never asks
            raise BitnetOnnxError(f"{folder}: OpenVINO has no ONNX Runtime profile")
        manifest = Manifest.read(folder)
        model = folder / manifest.model_file
        if manifest.needs_custom_ops:
            raise BitnetOnnxError(f"{model}: needs the bitnet_onnx op library, which OpenVINO cannot run")
        core = openvino.Core()
        try:
            compiled = core.compile_model(core.read_model(str(model)), "CPU", {"INFERENCE_NUM_THREADS": threads})
        except RuntimeError as e:  # its report spans many lines: one line for the bench's error
            raise BitnetOnnxError(f"{model}: OpenVINO cannot compile it: {' '.join(str(e).split())}") from None
        request, output, sample = compiled.create_infer_request(), compiled.output(SENTENCE_OUTPUT), _sample_ids(folder)

        def job(batch: int, seq: int) -> Job:
            feed = _ids_feed(sample, batch, seq)
            return lambda: request.infer(feed)[output]

        precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # e.g. "bf16"
        used = int(compiled.get_property("INFERENCE_NUM_THREADS"))  # OpenVINO may cap it (to physical cores)
        if used != threads:  # the table would compare it with ORT at another thread count
            raise BitnetOnnxError(f"{model}: OpenVINO runs {used} threads, not the {threads} asked for")
        return Loaded(job, facts={"inference_precision": precision, "openvino": openvino.get_version()})

    return load


def text_of_tokens(tokenizer, tokens: int, source: str = SAMPLE_TEXT, start: int = 0) -> str:
    """The shortest text ``source[start:...]`` (repeated as needed) that ``tokenizer`` (a TextTokenizer,
    the manifest's rules included) makes at least ``tokens`` ids of: exactly that many unless no prefix has."""
    text = source * (1 + tokens // 8)
    lo, hi = 1, len(text) - start
    while lo < hi:  # token counts grow with the prefix
        mid = (lo + hi) // 2
        if len(tokenizer.tokenize([text[start:start + mid]])[0]) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return text[start:start + lo]


def _onnx_text_loader() -> Loader:
    """A --text-input export's strings-in model (model_text.onnx), fed texts of the asked token count."""
    import numpy as np
    import onnxruntime  # noqa: F401

    from bitnet_onnx.manifest import Manifest
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT
    from bitnet_onnx.runtime.tokenization import TextTokenizer

    def load(folder: Path, threads: int, trace_prefix: str | None = None) -> Loaded:
        session = _onnx_session(folder, Manifest.read(folder), threads, True, trace_prefix)
        tokenizer = TextTokenizer.from_folder(folder)

        def job(batch: int, seq: int) -> Job:
            feed = {"text": np.array([text_of_tokens(tokenizer, seq)] * batch, dtype=object)}
            return lambda: session.run([SENTENCE_OUTPUT], feed)

        return Loaded(job, session.end_profiling if trace_prefix else None)

    return load


def _llama_cpp_loader() -> Loader:
    """A llama.cpp variant's model.gguf in a llama-cpp-python context, fed one sequence per text."""
    import numpy as np

    lib = llama_cpp.import_llama_cpp()
    from llama_cpp._internals import LlamaBatch

    def load(folder: Path, threads: int, trace_prefix: str | None = None) -> Loaded:
        if trace_prefix is not None:  # Runner.profiles is False: the bench never asks
            raise BitnetOnnxError(f"{folder}: llama.cpp has no ONNX Runtime profile")
        model = folder / llama_cpp.GGUF_NAME
        if not model.is_file():
            raise BitnetOnnxError(f"{folder}: no {llama_cpp.GGUF_NAME}")

        def context(tokens: int):  # one context holds a whole batch; the weights are loaded here
            return lib.Llama(model_path=str(model), embedding=True, n_ctx=tokens, n_batch=tokens,
                             n_ubatch=tokens, n_threads=threads, n_threads_batch=threads, verbose=False)

        state = {"llm": context(512)}

        def job(batch: int, seq: int) -> Job:
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
                lib.llama_memory_clear(lib.llama_get_memory(llm.ctx), True)
                if lib.llama_decode(llm.ctx, work.batch) != 0:
                    raise BitnetOnnxError(f"{model}: llama_decode failed for batch {batch} x {seq}")
                return [lib.llama_get_embeddings_seq(llm.ctx, s)[0] for s in range(batch)]

            return run

        return Loaded(job)

    return load


def _llama_cpp_facts(folder: Path) -> dict:
    """The file's size and its attention (llama.cpp's own)."""
    return {"file_bytes": (folder / llama_cpp.GGUF_NAME).stat().st_size, "attention": "llama.cpp"}


RUNNERS: dict[str, Runner] = {
    "onnx": Runner(_onnx_loader, export_facts, profiles=True),
    "onnx-text": Runner(_onnx_text_loader, export_facts, profiles=True),
    "llama.cpp": Runner(_llama_cpp_loader, _llama_cpp_facts, missing=llama_cpp.missing),
    "openvino": Runner(_openvino_loader, export_facts, missing=_openvino_missing),
}


def unavailable(name: str) -> str | None:
    """Why variant ``name`` cannot run on this install (its runner's package is not installed), or None."""
    return RUNNERS[variant(name).runner].missing()
