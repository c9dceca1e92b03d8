"""One variant in its own process, so its peak RSS is its own; the parent drives it over pipes.

Protocol (one JSON object per line): the worker first answers ``{"ready", "base_rss_bytes",
"load_rss_bytes"}`` (peak RSS after imports, then after loading the variant), then answers each
``{"cmd": "time", "batch", "seq"}`` with ``{"ms"}`` (one run of a full batch of ``seq`` real token
ids, no padding) and ``{"cmd": "exit"}`` with ``{"peak_rss_bytes"}``. Failures answer ``{"error"}``.

    python -m bitnet_onnx.bench.worker FOLDER THREADS RUNNER
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bitnet_onnx.bench import llama_cpp
from bitnet_onnx.bench.host import peak_rss_bytes
from bitnet_onnx.bench.report import export_facts
from bitnet_onnx.errors import BitnetOnnxError

# Repeated to each asked length: real token ids (the manifest's max_length does not bound a bench).
SAMPLE_TEXT = ("Ternary weights take the values minus one, zero and plus one; activations are eight-bit "
               "integers. Search queries and documents are embedded into the same space and compared by "
               "cosine similarity. The quick brown fox jumps over the lazy dog.")

# A runner's loader factory imports what the runner needs (counted in the base RSS, like any host
# process) and returns load(folder, threads) -> job(batch, seq) -> a call to time.
Job = Callable[[], object]
Loader = Callable[[Path, int], Callable[[int, int], Job]]


@dataclass(frozen=True)
class Runner:
    """How the bench runs one kind of built folder (``Variant.runner`` names one)."""

    loader: Callable[[], Loader]  # in the worker process
    facts: Callable[[Path], dict]  # in the parent: the folder's "file_bytes" and header facts (report.header)


def _onnx_loader() -> Loader:
    """An exported folder in an onnxruntime session, fed input_ids and attention_mask."""
    import numpy as np
    import onnxruntime  # noqa: F401
    from tokenizers import Tokenizer

    from bitnet_onnx.manifest import Manifest
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT, create_session
    from bitnet_onnx.runtime.tokenization import TOKENIZER_FILE

    def load(folder: Path, threads: int):
        session = create_session(folder, Manifest.read(folder), threads=threads)
        sample = np.asarray(Tokenizer.from_file(str(folder / TOKENIZER_FILE)).encode(SAMPLE_TEXT).ids, dtype=np.int64)

        def job(batch: int, seq: int) -> Job:
            feed = {"input_ids": np.tile(np.resize(sample, seq), (batch, 1)),
                    "attention_mask": np.ones((batch, seq), dtype=np.int64)}
            return lambda: session.run([SENTENCE_OUTPUT], feed)

        return job

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
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT, create_session
    from bitnet_onnx.runtime.tokenization import TextTokenizer

    def load(folder: Path, threads: int):
        session = create_session(folder, Manifest.read(folder), threads=threads, text=True)
        tokenizer = TextTokenizer.from_folder(folder)

        def job(batch: int, seq: int) -> Job:
            feed = {"text": np.array([text_of_tokens(tokenizer, seq)] * batch, dtype=object)}
            return lambda: session.run([SENTENCE_OUTPUT], feed)

        return job

    return load


RUNNERS: dict[str, Runner] = {"onnx": Runner(_onnx_loader, export_facts), "onnx-text": Runner(_onnx_text_loader, export_facts),
                               "llama.cpp": Runner(llama_cpp.loader, llama_cpp.facts)}


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, variant: str, folder: Path, threads: int, runner: str = "onnx"):
        self.variant, self.folder = variant, folder
        cmd = [sys.executable, "-m", "bitnet_onnx.bench.worker", str(folder), str(threads), runner]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info = self._reply()  # base_rss_bytes, load_rss_bytes

    def time_ms(self, batch: int, seq: int) -> float:
        return self.ask(cmd="time", batch=batch, seq=seq)["ms"]

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise BitnetOnnxError(f"{self.folder}: bench worker for {self.variant} exited with code {code}")
        reply = json.loads(line)
        if "error" in reply:
            raise BitnetOnnxError(reply["error"])
        return reply

    def close(self) -> dict:
        """Ends the process; returns its last reply (peak_rss_bytes)."""
        reply = self.ask(cmd="exit")
        self.proc.wait()
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def serve(folder: Path, threads: int, runner: str) -> None:
    """The worker process: loads the variant, then answers requests on stdin until "exit"."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe

    def reply(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    try:
        load = RUNNERS[runner].loader()
        base = peak_rss_bytes()
        job = load(folder, threads)
    except BitnetOnnxError as e:
        reply(error=str(e))
        return
    reply(ready=True, base_rss_bytes=base, load_rss_bytes=peak_rss_bytes())
    jobs: dict[tuple[int, int], Job] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "exit":
            reply(peak_rss_bytes=peak_rss_bytes())
            return
        key = (request["batch"], request["seq"])
        if key not in jobs:
            jobs[key] = job(*key)
        run = jobs[key]
        start = time.perf_counter()
        run()
        reply(ms=(time.perf_counter() - start) * 1000)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
