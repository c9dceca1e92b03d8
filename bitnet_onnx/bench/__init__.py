"""The benchmark library: used by ``bitnet-onnx bench``, ``bitnet-onnx demo`` and ``benchmarks/*.py``.

- ``variants``: the table of benchmarkable variants (one row each: how it is built, how a worker runs
  it, whether the table gets a ratio column against it).
- ``cache``: the on-disk cache of ``--shape`` models and exports, keyed by content hashes.
- ``worker``: one variant's session in its own process (its own peak RSS), driven over pipes; its
  ``RUNNERS`` table says how each kind of built folder is loaded, timed and described.
- ``timing``: interleaved repetitions (the order rotates every cell).
- ``measure``: all of the above for a set of exports -> one result dict.
- ``report``: the result's rows, its text table, JSON, progress lines.
- ``host``: CPU name and peak RSS of this process.

Adding to the bench: another variant is a row of ``variants.VARIANTS`` (plus a ``worker.RUNNERS`` row
when a worker cannot run it as an ONNX export fed token ids, e.g. a GGUF file or a strings-in graph);
another fact of an export in the table's header is a key of ``report.export_facts`` and a line of
``report.header``.

No argparse here: the command modules in ``bitnet_onnx/commands/`` parse arguments and call this.
Modules import their heavy dependencies (onnx, onnxruntime, the exporter) inside the functions that
need them, so a worker's base RSS and ``bitnet-onnx --help`` stay light.
"""
