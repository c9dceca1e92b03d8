"""Test support shipped with the package: the test-model factory (used by tests, demo and bench).

Modules, each importing only those below it:

- ``real_tokenizers``: the released tokenizers as HF folders (built once into a cache), tiny models
  carrying them.
- ``factory``: ``make_model``, HF model folders of any architecture and shape.
- ``archs``: ``TESTING_ARCHS``, one testing record per architecture of ``arch.ARCHITECTURES``.
- ``qwen3``, ``gemma3``: each family's record and the tokenizer builders it names.
- ``arch_testing`` (the record's fields), ``corpus`` (the tokenizers' training text),
  ``tokenizer_files`` (pieces of HF tokenizer files).
"""

from bitnet_onnx.testing.factory import SHAPES, make_model

__all__ = ["SHAPES", "make_model"]
