"""embed-dataset on a local Ray cluster vs Embedder.encode in one process, on the same corpus.

    python benchmarks/bench_dataset.py --texts 20000 --workers 1,2

Builds a random-weight BitNet model (default: the tiny Qwen3 shape, so the local-cluster overhead
is visible; --shape qwen3-0.6b for the real one), exports it (i2s), writes a Parquet corpus of
mixed-length texts, then times: Embedder.encode (threads = workers, one process) and the Ray job
with 1 and 2 workers of 1 thread each. Prints tokens/s, the job/encode ratio and the peak RSS of
each Ray worker process (VmHWM of the actors, read from /proc while they run).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bitnet_onnx.bench.host import cpu_name


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = "the of and to in is for on with as by at from that this be are or an it not was".split()
    return [" ".join(rng.choice(words) for _ in range(rng.choice((8, 16, 32, 64, 128)))) for _ in range(n)]


def _worker_peak_rss(stop: threading.Event, peaks: dict[int, int]) -> None:
    """VmHWM (kB) of every Ray worker process running EmbedBlocks, sampled until ``stop``."""
    while not stop.is_set():
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
                cmd = (status.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if b"ray::" not in cmd and b"EmbedBlocks" not in cmd:
                continue
            for line in text.splitlines():
                if line.startswith("VmHWM:"):
                    pid = int(status.parent.name)
                    peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))
        stop.wait(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=20000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--block-rows", type=int, default=2048)
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from bitnet_onnx.export.exporter import export
    from bitnet_onnx.runtime.dataset import EmbedOptions, run_job
    from bitnet_onnx.runtime.embedder import Embedder
    from bitnet_onnx.testing import make_model

    work = Path(tempfile.mkdtemp(prefix="bench-dataset-"))
    try:
        model = export(make_model(work / "model", "qwen3", shape=args.shape), work / "export")
        texts = corpus(args.texts)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), work / "corpus.parquet",
                       row_group_size=args.block_rows)
        print(f"# {cpu_name()}; {time.strftime('%Y-%m-%d')}; {len(texts)} texts; qwen3 {args.shape} i2s")
        print("| run | workers x threads | tokens | seconds | tokens/s | x encode | peak RSS per worker |")
        print("|---|---|---|---|---|---|---|")
        for workers in (int(w) for w in args.workers.split(",")):
            emb = Embedder(model, threads=workers)
            tokens = sum(len(x) for x in emb.tokenize(texts))
            start = time.perf_counter()
            emb.encode(texts, batch_size=32)
            encode_s = time.perf_counter() - start
            print(f"| Embedder.encode | 1 x {workers} | {tokens} | {encode_s:.1f} | {tokens / encode_s:.0f} | 1.00 | - |")
            del emb

            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            peaks: dict[int, int] = {}
            stop = threading.Event()
            sampler = threading.Thread(target=_worker_peak_rss, args=(stop, peaks), daemon=True)
            sampler.start()
            out = work / f"out-{workers}"
            summary = run_job(model, work / "corpus.parquet", out, EmbedOptions(batch_size=32), workers=workers,
                              block_rows=args.block_rows)
            stop.set()
            sampler.join()
            ray.shutdown()
            shutil.rmtree(out)
            rss = statistics.median(sorted(peaks.values())[-workers:]) / 1024 if peaks else float("nan")
            print(f"| embed-dataset (local Ray) | {workers} x 1 | {summary.tokens} | {summary.seconds:.1f} | "
                  f"{summary.tokens_per_second:.0f} | {encode_s / summary.seconds:.2f} | {rss:.0f} MB |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
