"""Load test of ``bitnet-onnx serve`` against ``Embedder.encode`` on the same texts with the same threads.

    python benchmarks/bench_serve.py [--shape qwen3-0.6b | --export DIR] [--threads 1]
                                     [--clients 1,8,32,128] [--per-client 2] [--min-requests 16]
                                     [--reps 3] [--json out.json]
    python benchmarks/bench_serve.py --burst 96x6 [--serve-args "--max-queue-tokens 8192"] ...

The server runs as ``bitnet-onnx serve`` in a subprocess; this process is the load: N concurrent
clients (asyncio tasks sharing an httpx connection pool of N), each sending its requests one after
the other (a closed loop; a cell holds max(--min-requests, --per-client x N) requests), one text per
request, base64 answers (what the ``openai`` client asks for). Workloads: "query" (a one-line
question, ~16 tokens) and "128-token" texts; every text is unique. Per cell: throughput (texts/s
over the cell's wall time), client-side p50 / p99 latency, and the throughput of
``Embedder.encode(texts, batch_size=32)`` on the cell's texts in this process (the server idle
meanwhile). Repetitions are interleaved (server, encode, encode, server, ...); printed are the
medians, and the median over repetitions of each repetition's serve / encode ratio. "session busy"
is the share of the server's wall time its worker spent in session runs (from its /metrics): near
100%, the server's own overhead (HTTP, JSON, tokenization, queueing) is hidden behind the model and
throughput is the session's speed on the batches it formed ("session runs"). At one client
the server cannot batch while ``encode`` batches all texts, so the ratio is low there by
construction; the goal (>= 0.9x) is for high concurrency.

``--burst CLIENTSxREQUESTS`` measures fairness under a burst instead (issue 23): that many clients each
send their requests one after the other, one in six a large one (12-16 texts of 30-55 words, the
kind an unfair server starves), the others 1-3 short texts; a 429 is retried after its Retry-After,
at most 5 times. Per repetition (a fresh plan each): p50 / p99 latency of a request from its first
try to its answer (retries included), refusals in all and the worst request's count; printed are
the medians over repetitions. ``--serve-args`` passes flags to the server (e.g. a small queue).
tests/bad_inputs/test_server_cases.py runs the same burst, small, in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bitnet_onnx import Embedder
from bitnet_onnx.bench.cache import cache_dir, cached_export, shape_model
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.timing import interleave

WORDS = ("ternary weights spiders legs capital France quick brown fox lazy dog cosine vector search query "
         "document passage weather sunny breeze west noon embedding model runtime operator matmul").split()
WORKLOADS = {"query": 16, "128-token": 128}  # tokens per text (the query's is approximate)


def make_texts(embedder: Embedder, tokens: int, n: int, seed: int) -> list[str]:
    """``n`` unique texts of about ``tokens`` tokens (exactly, up to one word, for the long ones)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [f"#{seed}-{i}"]
        while len(embedder.tokenize([" ".join(words)])[0]) < tokens:
            words.append(str(rng.choice(WORDS)))
        out.append(" ".join(words) + ("?" if tokens <= 16 else "."))
    return out


def start_server(folder: Path, threads: int, extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "bitnet_onnx", "serve", str(folder), "--port", "0", "--threads", str(threads),
           "--log-level", "warning", "--model-name", "bench", *extra]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    line, deadline = b"", time.monotonic() + 300
    while b"\n" not in line:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready or proc.poll() is not None:
            proc.kill()
            sys.exit(f"bench_serve: the server did not start: {line.decode(errors='replace')}")
        line += os.read(proc.stderr.fileno(), 4096)
    return proc, re.search(rb"http://[\d.]+:\d+", line).group().decode()


async def _load(url: str, per_client: list[list[str]]) -> tuple[float, list[float]]:
    """Each client sends its texts one request at a time; (wall seconds, latencies)."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(per_client), max_keepalive_connections=len(per_client))
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client:
        async def one_client(texts):
            for text in texts:
                start = time.perf_counter()
                r = await client.post("/v1/embeddings", json={"model": "bench", "input": [text],
                                                              "encoding_format": "base64"})
                latencies.append(time.perf_counter() - start)
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")

        start = time.perf_counter()
        await asyncio.gather(*(one_client(t) for t in per_client))
        return time.perf_counter() - start, latencies


def _session_seconds(url: str) -> tuple[float, float]:
    """(seconds in session runs, session runs) so far, from the server's /metrics."""
    values = {s.name: s.value for family in text_string_to_metric_families(httpx.get(url + "/metrics").text)
              for s in family.samples}
    return values["bitnet_onnx_batch_duration_seconds_sum"], values["bitnet_onnx_batch_duration_seconds_count"]


def measure_server(url: str, texts: list[str], clients: int) -> dict:
    per_client = [texts[i::clients] for i in range(clients)]
    busy_before, runs_before = _session_seconds(url)
    wall, latencies = asyncio.run(_load(url, per_client))
    busy_after, runs_after = _session_seconds(url)
    ms = np.array(latencies) * 1000
    return {"texts_per_s": len(texts) / wall, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "busy": (busy_after - busy_before) / wall,
            "runs": runs_after - runs_before}


def measure_encode(embedder: Embedder, texts: list[str]) -> dict:
    start = time.perf_counter()
    embedder.encode(texts, batch_size=32)
    return {"texts_per_s": len(texts) / (time.perf_counter() - start)}


# --- a burst of retrying clients (fairness) --------------------------------------------------------

BURST_RETRIES = 5


@dataclass
class BurstOutcome:
    texts: list[str]
    status: int = 0  # the last answer's
    refusals: int = 0  # 429s before it
    seconds: float = 0.0  # first try to last answer, retries included
    body: dict = field(default_factory=dict)


def burst_plan(clients: int, per_client: int, seed: int = 23) -> list[list[list[str]]]:
    """Per client, its requests' texts: one in six large (12-16 texts of 30-55 words), the others
    1-3 texts of 2-11 words; every text unique."""
    rng = np.random.default_rng(seed)
    plan = []
    for c in range(clients):
        requests = []
        for r in range(per_client):
            large = rng.random() < 1 / 6
            count = int(rng.integers(12, 17)) if large else int(rng.integers(1, 4))
            words = (30, 56) if large else (2, 12)
            requests.append([f"c{c}r{r}t{t} " + " ".join(rng.choice(WORDS, int(rng.integers(*words))))
                             for t in range(count)])
        plan.append(requests)
    return plan


async def run_burst(url: str, plan: list[list[list[str]]], max_retries: int = BURST_RETRIES,
                    timeout: float = 120.0) -> list[BurstOutcome]:
    """Each client sends its requests one after the other; a 429 is retried after its Retry-After, at
    most ``max_retries`` times."""
    limits = httpx.Limits(max_connections=len(plan), max_keepalive_connections=len(plan))
    outcomes: list[BurstOutcome] = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        async def one_client(requests):
            for texts in requests:
                outcome = BurstOutcome(texts)
                outcomes.append(outcome)
                start = time.perf_counter()
                while True:
                    r = await client.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"})
                    outcome.status = r.status_code
                    if r.status_code != 429 or outcome.refusals == max_retries:
                        break
                    outcome.refusals += 1
                    await asyncio.sleep(float(r.headers["retry-after"]))
                outcome.seconds = time.perf_counter() - start
                outcome.body = r.json()

        await asyncio.gather(*(one_client(requests) for requests in plan))
    return outcomes


def burst_summary(outcomes: list[BurstOutcome]) -> dict:
    seconds = np.array([o.seconds for o in outcomes])
    large = [o.refusals for o in outcomes if len(o.texts) >= 12]
    statuses = {}
    for o in outcomes:
        statuses[o.status] = statuses.get(o.status, 0) + 1
    return {"requests": len(outcomes), "statuses": dict(sorted(statuses.items())),
            "p50_s": float(np.percentile(seconds, 50)), "p99_s": float(np.percentile(seconds, 99)),
            "refusals": sum(o.refusals for o in outcomes), "worst_refusals": max(o.refusals for o in outcomes),
            "worst_large_refusals": max(large, default=0)}


def burst_line(summary: dict) -> str:
    return (f"{summary['requests']} requests: statuses {summary['statuses']}, p50 {summary['p50_s']:.2f} s, "
            f"p99 {summary['p99_s']:.2f} s, refusals {summary['refusals']} in all, worst request "
            f"{summary['worst_refusals']}, worst large request {summary['worst_large_refusals']}")


def main_burst(args, folder: Path) -> int:
    clients, per_client = (int(x) for x in args.burst.lower().split("x"))
    extra = args.serve_args.split() if args.serve_args else []
    print(f"bench_serve: burst of {clients} clients x {per_client} requests on {folder}, {cpu_name()}, "
          f"threads {args.threads}, server flags {extra}, {args.reps} reps", file=sys.stderr)
    proc, url = start_server(folder, args.threads, extra)
    summaries = []
    try:
        for rep in range(args.reps):
            summaries.append(burst_summary(asyncio.run(run_burst(url, burst_plan(clients, per_client, 23 + rep)))))
            print(f"  rep {rep}: {burst_line(summaries[-1])}", file=sys.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    keys = ("p50_s", "p99_s", "refusals", "worst_refusals", "worst_large_refusals")
    median = {k: statistics.median(s[k] for s in summaries) for k in keys}
    answered = all(set(s["statuses"]) == {200} for s in summaries)
    print(f"\n{cpu_name()}, threads {args.threads}, {datetime.date.today()}, burst {clients}x{per_client}, "
          f"server flags {' '.join(extra) or '(defaults)'}, median of {args.reps} reps\n")
    print("| requests | all answered 200 | p50 s | p99 s | refusals | worst request's refusals | worst large request's |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {clients * per_client} | {'yes' if answered else 'no'} | {median['p50_s']:.2f} | {median['p99_s']:.2f} | "
          f"{median['refusals']:.0f} | {median['worst_refusals']:.0f} | {median['worst_large_refusals']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "threads": args.threads, "burst": args.burst,
                                         "serve_args": extra, "reps": summaries, "median": median}, indent=2) + "\n")
    return 0 if code == 0 and answered else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--shape", default="qwen3-0.6b", help="random-weight model of this shape (bench cache)")
    where.add_argument("--export", type=Path, help="an exported folder to serve instead")
    ap.add_argument("--threads", type=int, default=1, help="ORT intra-op threads of the server and of encode")
    ap.add_argument("--clients", default="1,8,32,128", help="concurrent clients, comma-separated")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--per-client", type=int, default=2, help="requests per client in a cell (default 2)")
    ap.add_argument("--min-requests", type=int, default=16, help="requests per cell at least (default 16)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cache", help="bench cache folder (default ~/.cache/bitnet-onnx)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--burst", metavar="CLIENTSxREQUESTS", help="measure fairness under a burst instead (e.g. 96x6)")
    ap.add_argument("--serve-args", help="extra flags for the server, e.g. '--max-queue-tokens 8192'")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    workloads = [w for w in args.workloads.split(",") if w]

    if args.export:
        folder = args.export
    else:
        cache = cache_dir(args.cache)
        folder = cached_export(shape_model(args.shape, cache), "i2s", cache)
    if args.burst:
        return main_burst(args, folder)
    embedder = Embedder(folder, threads=args.threads)
    cells = [(w, c) for w in workloads for c in clients]
    texts = {}
    for w, c in cells:
        n = max(args.min_requests, args.per_client * c)
        texts[(w, c)] = make_texts(embedder, WORKLOADS[w], n, seed=10 + len(texts))
    print(f"bench_serve: {folder} on {cpu_name()}, threads {args.threads}, {args.reps} reps", file=sys.stderr)

    proc, url = start_server(folder, args.threads)
    try:
        asyncio.run(_load(url, [make_texts(embedder, 16, 4, seed=1)]))  # warm-up
        embedder.encode(make_texts(embedder, 16, 4, seed=2))

        def measure(name, cell):
            w, c = cell
            result = measure_server(url, texts[cell], c) if name == "serve" else measure_encode(embedder, texts[cell])
            print(f"  {name:6s} {w:9s} {c:4d} clients: {result['texts_per_s']:8.2f} texts/s", file=sys.stderr)
            return result

        results = interleave(["serve", "encode"], cells, args.reps, measure,
                             log=lambda m: print(m, file=sys.stderr))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    if code != 0:
        print(f"bench_serve: the server exited with {code}", file=sys.stderr)

    rows = []
    for w, c in cells:
        serve = results[("serve", (w, c))]
        encode = results[("encode", (w, c))]
        row = {"workload": w, "clients": c, "requests": len(texts[(w, c)])}
        for key in ("texts_per_s", "p50_ms", "p99_ms", "busy", "runs"):
            row[key] = statistics.median(r[key] for r in serve)
        row["encode_texts_per_s"] = statistics.median(r["texts_per_s"] for r in encode)
        # each repetition's two measurements ran back to back, in the same phase of a shared machine
        row["ratio"] = statistics.median(s["texts_per_s"] / e["texts_per_s"] for s, e in zip(serve, encode))
        row["reps"] = {"serve": serve, "encode": encode}
        rows.append(row)

    print(f"\n{cpu_name()}, threads {args.threads}, {datetime.date.today()}, median of {args.reps} interleaved reps\n")
    print("| workload | clients | requests | serve texts/s | p50 ms | p99 ms | session runs | session busy "
          "| encode texts/s | serve / encode |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['clients']} | {r['requests']} | {r['texts_per_s']:.2f} | {r['p50_ms']:.0f} | "
              f"{r['p99_ms']:.0f} | {r['runs']:.0f} | {100 * r['busy']:.0f}% | {r['encode_texts_per_s']:.2f} | "
              f"{r['ratio']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "threads": args.threads, "reps": args.reps,
                                         "export": str(folder), "rows": rows}, indent=2) + "\n")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
