"""The one error type users see as a one-line message (the CLI prints it and exits non-zero)."""


class BitnetOnnxError(ValueError):
    """Bad input: the message names the file, tensor or argument at fault."""
