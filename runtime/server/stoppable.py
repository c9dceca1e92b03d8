"""A session wrapper whose current run another thread can stop: ONNX Runtime checks ``RunOptions.terminate``
between nodes and then fails the run, so a batch whose clients all went away ends within a node's time."""

from __future__ import annotations

import onnxruntime as ort


class StoppableSession:
    """Wraps an ``InferenceSession`` (installed as ``Embedder.session``); the batcher calls ``begin`` before
    each run (under its lock) and ``stop`` from the event loop. Everything else is the session's."""

    def __init__(self, session):
        self._session = session
        self._options = ort.RunOptions()

    def begin(self) -> None:
        self._options = ort.RunOptions()  # a fresh one: a stop never carries over to the next run

    def stop(self) -> None:
        self._options.terminate = True

    def run(self, output_names, input_feed):
        return self._session.run(output_names, input_feed, self._options)

    def __getattr__(self, name: str):
        return getattr(self._session, name)
