"""The benchmark library: used by ``bitnet-onnx bench``, ``bitnet-onnx demo`` and ``benchmarks/*.py``.

Modules, each importing only those below it (pyproject's import-linter contract keeps the order):

- ``measure``: all of the below for a set of exports -> one result dict, the runs that would not fit
  the memory budget left out and said so; ``cache``: the on-disk cache
  of ``--shape`` models and exports, keyed by content hashes.
- ``worker``: one variant's session in its own process (its own peak RSS), driven over pipes; with
  ``--profile``, a second set of workers whose sessions run under ORT's profiler, never timed.
- ``runners``: the ``RUNNERS`` table, how a worker loads, times and describes each kind of built
  folder (an ONNX export fed token ids, a strings-in export, llama.cpp's GGUF file, an export in
  OpenVINO), and why a runner whose package is an optional install cannot run (``unavailable``).
- ``report``: a result's rows, its text tables (timings; --profile's op-type shares), JSON, progress
  lines, the facts of an export.
- ``profile``: ORT's profiler trace -> time per op type of each run, op types grouped into
  projections / attention / other, a cell's shares.
- ``variants``: the table of benchmarkable variants (one row each: how it is built, which runner
  runs it, whether the table gets a ratio column against it).
- ``llama_cpp``: the builders of the upstream llama.cpp variants (convert-gguf's file, quantized).
- ``host``: CPU name and peak RSS of this process; ``timing``: interleaved repetitions (the order
  rotates every cell).

Adding to the bench: another variant is a row of ``variants.VARIANTS`` (plus a ``runners.RUNNERS`` row
when a worker cannot run it as an ONNX export fed token ids, e.g. a GGUF file, a strings-in graph or
another runtime, whose ``missing`` names the package to install when it is optional);
another fact of an export in the table's header is a key of ``report.export_facts`` and a line of
``report.header``.

No argparse here: the command modules in ``cli/commands/`` (bitnet_onnx.commands) parse arguments and call this.
Modules import their heavy dependencies (onnx, onnxruntime, the exporter) inside the functions that
need them, so a worker's base RSS and ``bitnet-onnx --help`` stay light.
"""
