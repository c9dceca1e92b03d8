"""bitnet-onnx: BitNet ternary embedding models on ONNX Runtime."""

__version__ = "0.1.0"


def __getattr__(name):  # lazy: importing the package must not pull in onnxruntime
    if name == "Embedder":
        from bitnet_onnx.runtime.embedder import Embedder

        return Embedder
    raise AttributeError(name)
