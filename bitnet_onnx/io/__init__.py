"""The input and output rules every reader and writer of the package follows (docs/reliability.md), one job
per module: ``inputs`` (regular files only, size caps, one-line errors), ``outputs`` (all-or-nothing writes
under the user's umask, a full disk named), ``signals`` (Ctrl-C, SIGTERM and SIGHUP unwind, never while a
temp output is made). Callers import from here.
"""

from bitnet_onnx.io.inputs import (MAX_JSON_BYTES, MAX_TOKENIZER_JSON_BYTES, check_input_file, input_error,
                                   open_input_file, read_input_file, read_json, read_json_object, resolve)
from bitnet_onnx.io.outputs import (atomic_file, atomic_folder, check_apart, check_replaceable_folder,
                                    rename_noreplace, replace_together, size_text, umask)
from bitnet_onnx.io.signals import Terminated, exit_cleanly_on_termination, received_signal

__all__ = [
    "MAX_JSON_BYTES", "MAX_TOKENIZER_JSON_BYTES", "check_input_file", "input_error", "open_input_file",
    "read_input_file", "read_json", "read_json_object", "resolve",
    "atomic_file", "atomic_folder", "check_apart", "check_replaceable_folder", "rename_noreplace",
    "replace_together", "size_text", "umask",
    "Terminated", "exit_cleanly_on_termination", "received_signal",
]
