"""``--max-batch-memory GiB``: the activation budget of one session run, shared by ``embed`` and ``serve``."""

from __future__ import annotations

import argparse
import math

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import ACTIVATION_BUDGET_BYTES


def add_batch_memory_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-batch-memory", type=float, default=ACTIVATION_BUDGET_BYTES / (1 << 30), metavar="GIB",
                   help="activation memory per session run by the export's cost model (default "
                        f"{ACTIVATION_BUDGET_BYTES / (1 << 30):g} GiB): long texts get smaller batches; "
                        "a text that alone needs more is refused")


def batch_memory_bytes(gib: float) -> int:
    if not (math.isfinite(gib) and gib > 0):
        raise BitnetOnnxError(f"--max-batch-memory must be a positive number of GiB, got {gib:g}")
    return max(1, int(gib * (1 << 30)))
