"""The manifest's ids rules as ONNX ops, on the tokenizer op's right-padded output: tokenizer.json's
special tokens, the EOS rule, truncation to max_length, the mask from the true lengths, padding on
the manifest's side (what runtime/tokenization.py's TextTokenizer does in Python)."""

from __future__ import annotations

from onnx import TensorProto

from bitnet_onnx.export.builder import GraphBuilder
from bitnet_onnx.manifest import Manifest

INT64 = TensorProto.INT64
Frame = tuple[list[int], list[int]]  # the (prefix, suffix) special tokens around a text's own ids


class IdsRules:
    """The manifest's rules on the tokenizer op's right-padded output, as ONNX ops.

    The op's row (its own special tokens ``op_prefix``/``op_suffix`` around the text's ids) becomes
    tokenizer.json's row (``prefix`` + ids + ``suffix``), then: a trailing EOS is dropped and
    re-appended after truncation to max_length (EOS rule), an empty row gets one pad token
    (no EOS rule), rows are padded on the manifest's side. Every row is read through one index
    function, ``full_at``, so no row is ever copied or shifted.
    """

    def __init__(self, b: GraphBuilder, raw: str, raw_mask: str, manifest: Manifest,
                 op_frame: Frame, frame: Frame):
        self.b, self.m = b, manifest
        self.prefix, self.suffix = frame
        self.pad = int(manifest.pad_token_id)
        op_len = b.op("ReduceSum", [raw_mask, b.i64([1])], keepdims=0, name="op_lengths")
        n_op = len(op_frame[0]) + len(op_frame[1])
        self.body_len = b.op("Max", [b.op("Sub", [op_len, b.i64(n_op)]), b.i64(0)], name="body_lengths")
        self.skip = len(op_frame[0])  # op's prefix tokens before the body
        # One pad column so that gathers have a column even when every row is empty.
        self.raw = b.op("Pad", [raw, b.i64([0, 0, 0, 1]), b.i64(self.pad)], name="raw_padded")
        self.raw_last = b.op("Squeeze", [b.op("Sub", [b.op("Shape", [self.raw], start=1, end=2), b.i64([1])]),
                                         b.i64([0])], name="raw_last_column")

    def full_length(self) -> str:
        n = len(self.prefix) + len(self.suffix)
        return self.b.op("Add", [self.body_len, self.b.i64(n)], name="full_lengths") if n else self.body_len

    def full_at(self, idx: str, body_len: str) -> str:
        """Token of tokenizer.json's row at column ``idx`` ([N, K], in range or clamped)."""
        b, p = self.b, len(self.prefix)
        src = b.op("Add", [idx, b.i64(self.skip - p)]) if self.skip != p else idx
        src = b.op("Min", [b.op("Max", [src, b.i64(0)]), self.raw_last])
        tok = b.op("GatherElements", [self.raw, src], axis=1, name="body_tokens")
        if self.suffix:
            s_idx = b.op("Sub", [idx, b.op("Add", [body_len, b.i64(p)])])
            s_idx = b.op("Min", [b.op("Max", [s_idx, b.i64(0)]), b.i64(len(self.suffix) - 1)])
            s_tok = b.op("Gather", [b.i64(self.suffix), s_idx], axis=0, name="suffix_tokens")
            after = b.op("GreaterOrEqual", [idx, b.op("Add", [body_len, b.i64(p)])])
            tok = b.op("Where", [after, s_tok, tok])
        if self.prefix:
            p_tok = b.op("Gather", [b.i64(self.prefix), b.op("Min", [b.op("Max", [idx, b.i64(0)]), b.i64(p - 1)])],
                         axis=0, name="prefix_tokens")
            tok = b.op("Where", [b.op("Less", [idx, b.i64(p)]), p_tok, tok])
        return tok

    def build(self) -> tuple[str, str]:
        b, m = self.b, self.m
        body_col = b.op("Unsqueeze", [self.body_len, b.i64([1])], name="body_lengths_col")
        full_len = self.full_length()
        eos = m.append_eos_token_id
        if eos is not None:
            last_idx = b.op("Unsqueeze", [b.op("Sub", [full_len, b.i64(1)]), b.i64([1])])
            last = b.op("Squeeze", [self.full_at(last_idx, body_col), b.i64([1])], name="last_token")
            ends_eos = b.op("And", [b.op("Greater", [full_len, b.i64(0)]), b.op("Equal", [last, b.i64(int(eos))])])
            kept = b.op("Sub", [full_len, b.op("Cast", [ends_eos], to=INT64)])
            kept = b.op("Min", [kept, b.i64(int(m.max_length) - 1)], name="kept")
            final = b.op("Add", [kept, b.i64(1)], name="lengths")
        else:
            kept = b.op("Min", [full_len, b.i64(int(m.max_length))], name="kept")
            final = b.op("Max", [kept, b.i64(1)], name="lengths")
        width = b.op("ReduceMax", [b.op("Concat", [final, b.i64([0])], axis=0)], keepdims=0, name="width")
        pos = b.op("Unsqueeze", [b.op("Range", [b.i64(0), width, b.i64(1)]), b.i64([0])], name="positions")
        final_col = b.op("Unsqueeze", [final, b.i64([1])])
        kept_col = b.op("Unsqueeze", [kept, b.i64([1])])
        if m.padding_side == "left":
            rel = b.op("Sub", [pos, b.op("Sub", [width, final_col])], name="row_positions")
        else:
            rel = b.op("Add", [pos, b.op("Mul", [final_col, b.i64(0)])], name="row_positions")  # [N, W]
        real = b.op("And", [b.op("GreaterOrEqual", [rel, b.i64(0)]), b.op("Less", [rel, final_col])], name="real")
        tok = self.full_at(b.op("Max", [rel, b.i64(0)]), body_col)
        if eos is not None:
            tok = b.op("Where", [b.op("Equal", [rel, kept_col]), b.i64(int(eos)), tok], name="append_eos")
        else:
            tok = b.op("Where", [b.op("Less", [rel, kept_col]), tok, b.i64(self.pad)], name="empty_rows")
        ids = b.op("Where", [real, tok, b.i64(self.pad)], name="pad")
        return ids, b.op("Cast", [real], to=INT64, name="mask")
