"""``bitnet-onnx bench``: the i2s export against ORT baselines (f32, int8, nbits) on this machine.

Each variant is exported once into a cache (keyed by a content hash of the model folder, the
variant and the bitnet-onnx code) and run in its own worker process, so each variant's RSS is
its own process's (``VmHWM``: after loading the session, and the peak over all runs). The workers stay alive side by side and the parent asks them
in turn for one timed run, rotating the order each repetition (interleaved repetitions); the
table reports medians and ratios from this one run. Each (variant, shape) of up to 4096 tokens
first gets a discarded warm-up run. Inputs are full-length token sequences, no padding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bitnet_onnx import __version__
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import MANIFEST_NAME, WEIGHT_VARIANTS

# --shape -> (architecture, factory shape); the tiny ones are for quick checks of the bench itself.
SHAPES = {"qwen3-0.6b": ("qwen3", "qwen3-0.6b"), "gemma3-270m": ("gemma3", "gemma3-270m"),
          "qwen3-tiny": ("qwen3", "tiny"), "gemma3-tiny": ("gemma3", "tiny")}
DEFAULT_VARIANTS = "i2s,int8,ort-int8,nbits,f32"
BASELINE = "f32"
WARMUP_MAX_TOKENS = 4096  # bigger cells skip the warm-up run: seconds of compute dwarf first-run costs
NBITS_LABELS = {"nbits2": 2, "nbits4": 4}  # MatMulNBits with a chosen bit width
# What an ORT user does today without bitnet-onnx's variants: onnxruntime.quantization's
# quantize_dynamic (defaults: per-tensor int8 weights, dynamic uint8 activations) on the f32 export.
ORT_INT8 = "ort-int8"
RATIO_BASES = (BASELINE, "int8", ORT_INT8)  # "x <base>" columns, when the base variant ran

EPILOG = """\
examples:
  bitnet-onnx bench --shape gemma3-270m --threads 1          # random-weight model of the real shape
  bitnet-onnx bench path/to/hf-model --seq 16,128 --batch 1,16 --variants i2s,int8,f32 --json bench.json

Columns: ms per batch and tokens/s are medians over --reps interleaved repetitions; "x f32" and
"x int8", "x ort-int8" are tokens/s ratios from the same run; RSS is the peak resident memory of the worker
process that ran the variant (Python + onnxruntime + the session): "load" once the session is
created, "peak" after all runs (adds the largest batch's activations); file is the size of the
exported model (model.onnx and its external data).
Exports are cached under --cache-dir (default: $XDG_CACHE_HOME/bitnet-onnx or ~/.cache/bitnet-onnx).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("model_dir", metavar="MODEL_DIR", nargs="?", help="HF model folder (or use --shape)")
    p.add_argument("--shape", choices=list(SHAPES), help="bench a random-weight BitNet model of this real shape")
    p.add_argument("--seq", default="16,128,512", metavar="LIST", help="tokens per text (default 16,128,512)")
    p.add_argument("--batch", default="1,16", metavar="LIST", help="texts per batch (default 1,16)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="intra-op threads per session (default 1)")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, metavar="LIST",
                   help=f"weight variants to compare (default {DEFAULT_VARIANTS}; also f16, nbits2, nbits4; "
                        f"{ORT_INT8} = ORT's quantize_dynamic of the f32 export)")
    p.add_argument("--reps", type=int, default=3, metavar="N", help="timed repetitions per cell (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    p.add_argument("--cache-dir", metavar="DIR", help="where exports (and --shape models) are kept")
    p.add_argument("--no-cache", action="store_true", help="re-export even when a cached export exists")


def run(args: argparse.Namespace) -> int:
    configs = [(b, s) for b in _int_list(args.batch, "--batch") for s in _int_list(args.seq, "--seq")]
    variants = _variants(args.variants)
    if args.threads < 1:
        raise BitnetOnnxError(f"--threads must be >= 1, got {args.threads}")
    if args.reps < 1:
        raise BitnetOnnxError(f"--reps must be >= 1, got {args.reps}")
    if bool(args.model_dir) == bool(args.shape):
        raise BitnetOnnxError("give either MODEL_DIR or --shape")
    if args.json and not Path(args.json).resolve().parent.is_dir():  # fail before the long part
        raise BitnetOnnxError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    cache = cache_dir(args.cache_dir)
    if args.shape:
        model_dir, label = shape_model(args.shape, cache), f"{args.shape} (random BitNet weights, seed 0)"
    else:
        model_dir, label = Path(args.model_dir), str(args.model_dir)
        if not model_dir.is_dir():
            raise BitnetOnnxError(f"{model_dir}: not a folder")
    folders = {v: cached_export(model_dir, v, cache, refresh=args.no_cache) for v in variants}
    result = bench(folders, configs, args.threads, args.reps, log=_progress)
    result["model"] = label
    print(format_table(result))
    if args.json:
        _write_json(Path(args.json), result)
    return 0


# --- inputs and cache -------------------------------------------------------------------------------

def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BitnetOnnxError(f"{name} {text!r}: expected comma-separated integers, e.g. 16,128") from None
    if not values or min(values) < 1:
        raise BitnetOnnxError(f"{name} {text!r}: expected positive integers")
    return values


def _variants(text: str) -> list[str]:
    variants = [v.strip() for v in text.split(",") if v.strip()]
    choices = [*WEIGHT_VARIANTS, *NBITS_LABELS, ORT_INT8]
    bad = [v for v in variants if v not in choices]
    if bad or not variants:
        raise BitnetOnnxError(f"--variants {text!r}: choose from {', '.join(choices)}")
    return list(dict.fromkeys(variants))


def cache_dir(explicit: str | None) -> Path:
    if explicit:
        root = Path(explicit)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bitnet-onnx"
    root.mkdir(parents=True, exist_ok=True)
    return root


def code_hash(*modules: str) -> str:
    """Hash of the Python sources of ``modules`` (a package: the .py files of its folder), so a changed
    exporter or factory never reuses a stale cache entry."""
    import importlib.util

    h = hashlib.sha256(__version__.encode())
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec.submodule_search_locations:
            files = sorted(f for d in spec.submodule_search_locations for f in Path(d).glob("*.py"))
        else:
            files = [Path(spec.origin)]
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


EXPORT_CODE = ("bitnet_onnx", "bitnet_onnx.export")  # the core and the exporter
FACTORY_CODE = ("bitnet_onnx.arch", "bitnet_onnx.testing")


def folder_hash(folder: Path) -> str:
    """Content hash of a model folder: every file's relative path and bytes."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def shape_model(shape: str, cache: Path) -> Path:
    """A random-weight BitNet model of a real shape (seed 0), generated once into the cache."""
    from bitnet_onnx.testing import make_model

    folder = cache / "models" / f"{shape}-bitnet-seed0-{code_hash(*FACTORY_CODE)}"
    if (folder / "config.json").is_file():
        return folder
    for stale in (cache / "models").glob(f"{shape}-bitnet-seed0-*"):  # older factory code
        shutil.rmtree(stale, ignore_errors=True)
    _progress(f"generating a random-weight BitNet {shape} model in {folder} ...")
    arch, factory_shape = SHAPES[shape]
    return _build_atomically(folder, lambda tmp: make_model(tmp, arch, bitnet=True, seed=0, shape=factory_shape))


def cached_export(model_dir: Path, variant: str, cache: Path, refresh: bool = False) -> Path:
    model_hash = folder_hash(model_dir)
    folder = cache / "exports" / f"{model_hash}-{code_hash(*EXPORT_CODE)}-{variant}"
    if (folder / MANIFEST_NAME).is_file() and not refresh:
        return folder
    for stale in (cache / "exports").glob(f"{model_hash}-*-{variant}"):  # older exporter code
        shutil.rmtree(stale, ignore_errors=True)
    _progress(f"exporting {model_dir} as {variant} ...")
    return _build_atomically(folder, lambda tmp: export_variant(model_dir, tmp, variant))


def export_variant(model_dir: Path, out_dir: Path, variant: str) -> Path:
    """Exports one variant; "nbits2" / "nbits4" pick MatMulNBits' bits ("nbits": the exporter's default)."""
    from bitnet_onnx.export.exporter import export

    if variant in NBITS_LABELS:
        return export(model_dir, out_dir, weights="nbits", bits=NBITS_LABELS[variant])
    if variant == ORT_INT8:
        return quantize_dynamic_export(export(model_dir, out_dir, weights="f32"))
    return export(model_dir, out_dir, weights=variant)


def quantize_dynamic_export(folder: Path) -> Path:
    """Replaces an f32 export's model.onnx by onnxruntime.quantization.quantize_dynamic's output
    (the projections' MatMuls; attention MatMuls have no constant weight and stay float)."""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    source, quantized = folder / "model.onnx", folder / "ort_int8.onnx"
    # onnx's shape inference stops at com.microsoft ops (RotaryEmbedding): tensors after them are
    # float. The quantizer logs a warning per such tensor on the root logger: silenced here.
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR
    try:
        quantize_dynamic(source, quantized, op_types_to_quantize=["MatMul"], use_external_data_format=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)
    for stale in folder.glob("model.onnx*"):
        stale.unlink()
    quantized.rename(source)  # its external data file keeps the name recorded inside the model
    return folder


def _build_atomically(folder: Path, build) -> Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        shutil.rmtree(tmp)  # builders want to create the folder themselves
        build(tmp)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def model_bytes(folder: Path) -> int:
    """Size of the model file and its external data (everything in the folder but tokenizer/manifest)."""
    from bitnet_onnx.manifest import Manifest

    manifest = Manifest.read(folder)
    model = folder / manifest.model_file
    total = model.stat().st_size
    try:
        import onnx
        from onnx.external_data_helper import ExternalDataInfo, uses_external_data

        proto = onnx.load(str(model), load_external_data=False)
        files = {ExternalDataInfo(t).location for t in proto.graph.initializer if uses_external_data(t)}
        total += sum((folder / f).stat().st_size for f in files)
    except Exception:  # unreadable here means the session would fail too; the worker reports it
        pass
    return total


# --- measuring -------------------------------------------------------------------------------------

@dataclass
class Worker:
    """One variant's session in its own process (so its peak RSS is its own), driven over pipes."""

    variant: str
    folder: Path
    threads: int
    proc: subprocess.Popen = field(init=False)

    def __post_init__(self):
        cmd = [sys.executable, "-m", "bitnet_onnx.commands.bench", str(self.folder), str(self.threads)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info = self._reply()

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
        reply = self.ask(cmd="exit")
        self.proc.wait()
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def bench(folders: dict[str, Path], configs: list[tuple[int, int]], threads: int, reps: int, log=None) -> dict:
    """Interleaved timing of every variant on every (batch, seq); medians, ratios, RSS, file sizes."""
    import onnxruntime as ort

    workers: dict[str, Worker] = {}
    times: dict[tuple[str, int, int], list[float]] = {}
    try:
        for v, folder in folders.items():
            workers[v] = Worker(v, folder, threads)
        order = list(workers)
        for rep in range(reps + 1):  # rep 0 is the warm-up
            if log:
                log(f"bench: {'warm-up' if rep == 0 else f'repetition {rep}/{reps}'} ...")
            for batch, seq in configs:
                if rep == 0 and batch * seq > WARMUP_MAX_TOKENS:
                    continue
                for v in order:
                    ms = workers[v].ask(cmd="time", batch=batch, seq=seq)["ms"]
                    if rep > 0:
                        times.setdefault((v, batch, seq), []).append(ms)
                order = order[1:] + order[:1]  # rotate so no variant always runs first
        memory = {v: w.close() for v, w in workers.items()}
    finally:
        for w in workers.values():
            w.kill()

    variants = {v: {"file_bytes": model_bytes(f), "base_rss_bytes": workers[v].info["base_rss_bytes"],
                    "load_rss_bytes": workers[v].info["load_rss_bytes"],
                    "peak_rss_bytes": memory[v]["peak_rss_bytes"], "folder": str(f)} for v, f in folders.items()}
    rows = []
    for batch, seq in configs:
        med = {v: statistics.median(times[(v, batch, seq)]) for v in folders}
        for v in folders:
            tps = batch * seq / (med[v] / 1000)
            row = {"variant": v, "batch": batch, "seq": seq, "ms_per_batch": med[v], "tokens_per_s": tps,
                   "ms_all": times[(v, batch, seq)]}
            for base in RATIO_BASES:
                if base in med:
                    row[f"x_{base}"] = med[base] / med[v]
            rows.append(row)
    return {"threads": threads, "reps": reps, "onnxruntime": ort.__version__, "bitnet_onnx": __version__,
            "cpu": cpu_name(), "variants": variants, "rows": rows}


def format_table(result: dict) -> str:
    has = {k for r in result["rows"] for k in r if k.startswith("x_")}
    ratios = [f"x_{base}" for base in RATIO_BASES if f"x_{base}" in has]
    head = ["batch", "seq", "variant", "ms/batch", "tokens/s"] + [f"x {k[2:]}" for k in ratios]
    head += ["load RSS MB", "peak RSS MB", "file MB", "load/file"]
    lines = []
    for r in result["rows"]:
        mem = result["variants"][r["variant"]]
        cells = [str(r["batch"]), str(r["seq"]), r["variant"], _ms(r['ms_per_batch']), f"{r['tokens_per_s']:.0f}"]
        cells += [f"{r[k]:.2f}" for k in ratios]
        cells += [f"{mem['load_rss_bytes'] / 2**20:.0f}", f"{mem['peak_rss_bytes'] / 2**20:.0f}",
                  f"{mem['file_bytes'] / 2**20:.0f}", f"{mem['load_rss_bytes'] / mem['file_bytes']:.2f}"]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    title = (f"model: {result.get('model', '?')} | threads {result['threads']} | median of {result['reps']} "
             f"interleaved reps | onnxruntime {result['onnxruntime']} | {result['cpu']}")
    return "\n".join([title, fmt(head), fmt(["-" * w for w in widths]), *(fmt(c) for c in lines)])


def _ms(ms: float) -> str:
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3f}"


def cpu_name() -> str:
    """The CPU's model name, for benchmark headers (also used by benchmarks/*.py)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the worker process ------------------------------------------------------------------------------

def _rss_peak_bytes() -> int:
    """This process's peak RSS: VmHWM (per address space, reset by exec; ru_maxrss would carry over
    the parent's peak on Linux), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _worker(folder: str, threads: int) -> None:
    """Loads one session and answers {"cmd": "time", "batch", "seq"} / {"cmd": "exit"} lines on stdin."""
    import time

    import numpy as np

    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe

    def reply(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    try:
        import onnxruntime  # noqa: F401  (counted in the base RSS, like any host process)

        from bitnet_onnx.manifest import Manifest
        from bitnet_onnx.runtime.session import create_session
        from bitnet_onnx.runtime.tokenization import TOKENIZER_FILE
        from tokenizers import Tokenizer

        base = _rss_peak_bytes()
        manifest = Manifest.read(Path(folder))
        session = create_session(folder, manifest, threads=threads)
        # Real token ids, repeated to the asked length (the manifest's max_length does not bound a bench).
        sample = Tokenizer.from_file(str(Path(folder) / TOKENIZER_FILE)).encode(_SAMPLE_TEXT).ids
    except BitnetOnnxError as e:
        reply(error=str(e))
        return
    reply(ready=True, base_rss_bytes=base, load_rss_bytes=_rss_peak_bytes())
    inputs: dict[tuple[int, int], dict] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "exit":
            reply(peak_rss_bytes=_rss_peak_bytes())
            return
        key = (request["batch"], request["seq"])
        if key not in inputs:
            ids = np.resize(np.asarray(sample, dtype=np.int64), key[1])
            inputs[key] = {"input_ids": np.tile(ids, (key[0], 1)), "attention_mask": np.ones(key, dtype=np.int64)}
        start = time.perf_counter()
        session.run(["sentence_embedding"], inputs[key])
        reply(ms=(time.perf_counter() - start) * 1000)


_SAMPLE_TEXT = ("Ternary weights take the values minus one, zero and plus one; activations are eight-bit "
                "integers. Search queries and documents are embedded into the same space and compared by "
                "cosine similarity. The quick brown fox jumps over the lazy dog.")


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
