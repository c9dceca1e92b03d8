"""Session runs another thread can stop: ONNX Runtime checks ``RunOptions.terminate`` between nodes and then
fails the run, so a batch whose clients all went away ends within a node's time."""

from __future__ import annotations

import onnxruntime as ort


class StoppableRuns:
    """The ``RunOptions`` the batcher's runs take (``Embedder.run_batch(..., run_options=options)``): the
    batcher calls ``begin`` before each run (under its lock) and ``stop`` from the event loop."""

    def __init__(self):
        self.options = ort.RunOptions()

    def begin(self) -> None:
        self.options = ort.RunOptions()  # a fresh one: a stop never carries over to the next run

    def stop(self) -> None:
        self.options.terminate = True
