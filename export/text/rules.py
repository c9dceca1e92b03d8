"""The manifest's ids rules as ONNX ops, on the tokenizer op's right-padded output: tokenizer.json's
special tokens, the EOS rule, truncation to max_length keeping the special tokens, the mask from the
true lengths, padding on the manifest's side (bitnet_onnx.special_tokens's IdsRule, which
runtime/tokenization.py's TextTokenizer applies in Python)."""

from __future__ import annotations

from onnx import TensorProto

from bitnet_onnx.export.builder import GraphBuilder
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.special_tokens import IdsRule, SpecialTokens

INT64 = TensorProto.INT64
Frame = tuple[list[int], list[int]]  # the (prefix, suffix) special tokens the tokenizer op puts around a text


class IdsRules:
    """The manifest's rules on the tokenizer op's right-padded output, as ONNX ops.

    The op's row (its own special tokens ``op_prefix``/``op_suffix`` around the text's ids) becomes
    tokenizer.json's row (``specials``: prefix + ids + suffix), then IdsRule: with the EOS rule, an
    EOS the text's ids end with is dropped and the rule's EOS ends the row (after the suffix unless
    that ends with it); the text's ids are cut to max_length less the row's special tokens; an empty
    row of no special tokens gets one pad token; rows are padded on the manifest's side. Every row is
    read through one index function, ``full_at``, so no row is ever copied or shifted.
    """

    def __init__(self, b: GraphBuilder, raw: str, raw_mask: str, manifest: Manifest,
                 op_frame: Frame, specials: SpecialTokens):
        self.b, self.m = b, manifest
        self.prefix, self.suffix = list(specials.prefix), list(specials.suffix)
        self.rule = IdsRule(specials, manifest.append_eos_token_id, int(manifest.max_length))
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
        """tokenizer.json's row length (its special tokens, no rule applied)."""
        n = len(self.prefix) + len(self.suffix)
        return self.b.op("Add", [self.body_len, self.b.i64(n)], name="full_lengths") if n else self.body_len

    def full_at(self, idx: str, body_len: str, suffix: list[int] | None = None) -> str:
        """Token at column ``idx`` ([N, K], in range or clamped) of the row prefix + the first
        ``body_len`` body ids + ``suffix`` (default: tokenizer.json's)."""
        b, p = self.b, len(self.prefix)
        suffix = self.suffix if suffix is None else suffix
        src = b.op("Add", [idx, b.i64(self.skip - p)]) if self.skip != p else idx
        src = b.op("Min", [b.op("Max", [src, b.i64(0)]), self.raw_last])
        tok = b.op("GatherElements", [self.raw, src], axis=1, name="body_tokens")
        if suffix:
            s_idx = b.op("Sub", [idx, b.op("Add", [body_len, b.i64(p)])])
            s_idx = b.op("Min", [b.op("Max", [s_idx, b.i64(0)]), b.i64(len(suffix) - 1)])
            s_tok = b.op("Gather", [b.i64(suffix), s_idx], axis=0, name="suffix_tokens")
            after = b.op("GreaterOrEqual", [idx, b.op("Add", [body_len, b.i64(p)])])
            tok = b.op("Where", [after, s_tok, tok])
        if self.prefix:
            p_tok = b.op("Gather", [b.i64(self.prefix), b.op("Min", [b.op("Max", [idx, b.i64(0)]), b.i64(p - 1)])],
                         axis=0, name="prefix_tokens")
            tok = b.op("Where", [b.op("Less", [idx, b.i64(p)]), p_tok, tok])
        return tok

    def build(self) -> tuple[str, str]:
        b, m, rule = self.b, self.m, self.rule
        ends = rule.ends
        suffix, n_ends = list(ends.suffix), ends.count
        body = self.body_len
        eos = rule.eos_id
        if eos is not None:  # the text's own trailing EOS is the rule's
            body_col = b.op("Unsqueeze", [body, b.i64([1])], name="body_lengths_col")
            last_idx = b.op("Unsqueeze", [b.op("Add", [body, b.i64(len(self.prefix) - 1)]), b.i64([1])])
            last = b.op("Squeeze", [self.full_at(last_idx, body_col), b.i64([1])], name="last_text_token")
            ends_eos = b.op("And", [b.op("Greater", [body, b.i64(0)]), b.op("Equal", [last, b.i64(int(eos))])])
            body = b.op("Sub", [body, b.op("Cast", [ends_eos], to=INT64)], name="text_lengths")
        kept = b.op("Min", [body, b.i64(rule.text_room)], name="kept")  # the text cut, the specials kept
        final = b.op("Add", [kept, b.i64(n_ends)], name="lengths") if n_ends else b.op("Max", [kept, b.i64(1)],
                                                                                         name="lengths")
        width = b.op("ReduceMax", [b.op("Concat", [final, b.i64([0])], axis=0)], keepdims=0, name="width")
        pos = b.op("Unsqueeze", [b.op("Range", [b.i64(0), width, b.i64(1)]), b.i64([0])], name="positions")
        final_col = b.op("Unsqueeze", [final, b.i64([1])])
        kept_col = b.op("Unsqueeze", [kept, b.i64([1])])
        if m.padding_side == "left":
            rel = b.op("Sub", [pos, b.op("Sub", [width, final_col])], name="row_positions")
        else:
            rel = b.op("Add", [pos, b.op("Mul", [final_col, b.i64(0)])], name="row_positions")  # [N, W]
        real = b.op("And", [b.op("GreaterOrEqual", [rel, b.i64(0)]), b.op("Less", [rel, final_col])], name="real")
        tok = self.full_at(b.op("Max", [rel, b.i64(0)]), kept_col, suffix)
        if not n_ends:  # an empty row of no special tokens: one pad token keeps pooling defined
            tok = b.op("Where", [b.op("Less", [rel, kept_col]), tok, b.i64(self.pad)], name="empty_rows")
        ids = b.op("Where", [real, tok, b.i64(self.pad)], name="pad")
        return ids, b.op("Cast", [real], to=INT64, name="mask")
