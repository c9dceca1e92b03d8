"""bitnet-onnx: BitNet ternary embedding models on ONNX Runtime."""

__version__ = "0.1.0"

OP_DOMAIN = "bitnet_onnx"
OP_DOMAIN_VERSION = 1
OP_NAME = "I2STernaryMatMul"


def __getattr__(name):  # lazy: importing the package must not pull in onnxruntime
    if name == "Embedder":
        from .runtime.embedder import Embedder

        return Embedder
    raise AttributeError(name)
