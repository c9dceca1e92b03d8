"""A batch's activation memory by the export's cost model, so batches are cut by bytes, not only tokens.

The manifest records what a run of B texts padded to S tokens costs (``Manifest.batch_bytes``: linear
in S for EncoderAttention, quadratic for the stock decomposition's [B, H, S, S] tensors). ``BatchMemory``
tells ``plan_batches`` (texts sorted by length, cut into batches) how many texts of a width fit in
``budget`` bytes, and refuses one text that alone does not (as TEI's max-batch-tokens refuses, but by
memory): an export keeps max_length within the default budget, so that happens only with a smaller
budget or an old export.
"""

from __future__ import annotations

from collections.abc import Sequence

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import size_text
from bitnet_onnx.manifest import ACTIVATION_BUDGET_BYTES, Manifest


class BatchMemory:
    """``texts_that_fit(width)``: how many texts of ``width`` padded tokens one run holds in ``budget``."""

    def __init__(self, manifest: Manifest, budget: int = ACTIVATION_BUDGET_BYTES):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise BitnetOnnxError(f"max_batch_bytes must be a positive integer, got {budget!r}")
        self.manifest, self.budget = manifest, budget

    def texts_that_fit(self, width: int, wanted: int) -> int:
        """At most ``wanted``; an error naming the budget when not even one text fits."""
        one = self.manifest.batch_bytes(1, width)
        if one is None:  # an export from before the cost model: the token budget alone
            return wanted
        if one > self.budget:
            attention = self.manifest.attention
            # only an attention holding [B, H, S, S] scores grows with the square of the text
            hint = ", or re-export with --attention ort (no op library) or fused" \
                if self.manifest.attention_bytes_per_token_pair else ""
            raise BitnetOnnxError(
                f"a text of {width} tokens needs about {size_text(one)} of activations with this export's attention "
                f"({attention}), over max_batch_bytes (--max-batch-memory) {size_text(self.budget)}; shorten it or "
                f"raise the budget{hint}")
        return max(1, min(wanted, self.budget // one))


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens: int,
                 memory: BatchMemory | None = None) -> list[list[int]]:
    """Indices of texts of these token ``lengths`` sorted by length, longest first, cut into batches of
    at most ``batch_size`` texts and ``max_tokens`` padded tokens (dynamic padding: a batch is as wide
    as its first text; one text always fits the token count), and within ``memory``'s bytes when given
    (an error for a text that alone does not fit)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches, start = [], 0
    while start < len(order):
        width = max(lengths[order[start]], 1)
        n = max(1, min(batch_size, max_tokens // width))
        if memory is not None:
            n = memory.texts_that_fit(width, n)
        batches.append(order[start:start + n])
        start += n
    return batches
