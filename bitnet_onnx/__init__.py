"""bitnet-onnx: BitNet ternary embedding models on ONNX Runtime."""

from bitnet_onnx.version import __version__

__all__ = ["Embedder", "__version__"]


def __getattr__(name):  # the public facade, lazy: importing the package must not pull in onnxruntime
    if name == "Embedder":
        from bitnet_onnx.runtime.embedder import Embedder

        return Embedder
    raise AttributeError(name)
