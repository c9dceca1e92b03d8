"""What the adapters share: one ``Embedder`` from a folder or an instance, and a clear missing-library error."""

from __future__ import annotations

from pathlib import Path

EXTRA_HINT = "pip install 'bitnet-onnx[integrations]'"


def missing(library: str, package: str, error: ImportError) -> ImportError:
    """The ImportError to raise when an adapter's library is absent (naming the pip package)."""
    return ImportError(f"bitnet_onnx.integrations needs {library} for this adapter: pip install {package} "
                       f"(or {EXTRA_HINT}); import failed: {error}")


def embedder_for(model, threads: int | None = None):
    """``model``: an export folder (str or Path) or a ready ``bitnet_onnx.Embedder``."""
    from bitnet_onnx.errors import BitnetOnnxError
    from bitnet_onnx.runtime.embedder import Embedder

    if isinstance(model, Embedder):
        if threads is not None:
            raise BitnetOnnxError("threads applies to a folder; an Embedder instance already has its session")
        return model
    if isinstance(model, (str, Path)):
        return Embedder(model, threads=threads)
    raise BitnetOnnxError(f"model must be an export folder or a bitnet_onnx.Embedder, got {type(model).__name__}")


def encode_options(batch_size: int, dimensions: int | None, prompt_name: str | None) -> dict:
    """``Embedder.encode`` keyword arguments; ``prompt_name`` "" means no prompt, None the method's own."""
    options = {"batch_size": batch_size, "dimensions": dimensions}
    if prompt_name == "":
        options["prompt"] = ""
    elif prompt_name is not None:
        options["prompt_name"] = prompt_name
    return options
