"""ByteFallbackBpe: the ``tokenizers`` library's ids for SentencePiece-style BPE tokenizers with
byte fallback (Gemma3's), as one op of the graph. Its ONNX schema, and the node built from a
tokenizer.json (``bpe_node``), which refuses any tokenizer outside the family the op reproduces
exactly (``supports`` says whether it would). Contract: docs/op.md.

The family: model BPE (dropout none, no continuing-subword prefix or end-of-word suffix,
``ignore_merges`` false), normalizer ``Replace(" " -> marker)`` (the marker without spaces, e.g.
"▁"), pre-tokenizer none or ``Split(" ", MergedWithPrevious)`` (a no-op once no space is left),
added tokens all ``normalized``/``lstrip``/``rstrip``/``single_word`` false. The tokenizer's
truncation, padding and post-processor are not the op's: it adds no special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bitnet_onnx.customops.library import DOMAIN
from bitnet_onnx.customops.op_schema import Attr, Param, op_schema
from bitnet_onnx.errors import BitnetOnnxError

NAME = "ByteFallbackBpe"
MAX_ID = 2**31 - 2  # the op keeps ids in int32

_DOC = (
    "Tokenizes each UTF-8 string of `text` like the HF tokenizers library's encode(text, "
    "add_special_tokens=False) for SentencePiece-style BPE: added tokens split off the raw text "
    "(leftmost-longest), spaces of the rest replaced by space_replacement, BPE with byte fallback "
    "of each segment between added tokens. No special token is added. See docs/op.md."
)
_FAMILY = ("the ByteFallbackBpe op implements SentencePiece-style BPE with byte fallback only "
           "(Gemma3's tokenizer family)")


class _OutOfFamily(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


def supports(tokenizer_json: dict) -> bool:
    """True when ``bpe_node`` accepts this parsed tokenizer.json (the op gives its exact ids)."""
    try:
        _tables(tokenizer_json)
    except _OutOfFamily:
        return False
    return True


def bpe_node(tokenizer_json: dict, source_path: str | Path, input_name: str, output_names: Sequence[str],
             max_length: int, name: str | None = "tokenizer"):
    """The ByteFallbackBpe node (onnx NodeProto) text [N] -> (input_ids, attention_mask) [N, S] of
    this parsed tokenizer.json (read from ``source_path``, named in errors). ``max_length`` caps each
    row (0: no cap). Raises BitnetOnnxError naming the file and the field when the tokenizer is
    outside the op's family. The graph must import the ``bitnet_onnx`` domain (version 1)."""
    from onnx import TensorProto, helper

    if len(output_names) != 2:
        raise BitnetOnnxError(f"{NAME}: output_names must be (input_ids, attention_mask), got {list(output_names)}")
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 0:
        raise BitnetOnnxError(f"{NAME}: max_length must be an integer >= 0 (0: no cap), got {max_length!r}")
    try:
        t = _tables(tokenizer_json)
    except _OutOfFamily as e:
        raise BitnetOnnxError(f"{source_path}: {e.field}: {e.problem}; {_FAMILY}") from None

    def strings(attr: str, values: list[str]):
        return helper.make_tensor(attr, TensorProto.STRING, [len(values)], [v.encode("utf-8") for v in values])

    attrs = {"vocab": strings("vocab", t["vocab"]), "merges": t["merges"], "unk_id": t["unk_id"],
             "fuse_unk": int(t["fuse_unk"]), "byte_fallback": int(t["byte_fallback"]),
             "space_replacement": t["space_replacement"], "max_length": max_length}
    if t["vocab_ids"] is not None:
        attrs["vocab_ids"] = t["vocab_ids"]
    if t["added_tokens"]:
        attrs["added_tokens"] = strings("added_tokens", t["added_tokens"])
        attrs["added_token_ids"] = t["added_token_ids"]
    node = helper.make_node(NAME, [input_name], list(output_names), name=name, domain=DOMAIN)
    # make_attribute cannot infer the type of an empty list (a tokenizer without merges).
    node.attribute.extend(helper.make_attribute(k, v, attr_type=helper.AttributeProto.INTS)
                          if isinstance(v, list) else helper.make_attribute(k, v) for k, v in attrs.items())
    return node


# -- the family check and the tables --------------------------------------------------------------

def _tables(tok: dict) -> dict:
    """The op's tables from a tokenizer.json; raises _OutOfFamily at the first field outside the family."""
    if not isinstance(tok, dict):
        raise _OutOfFamily("(top level)", "is not a JSON object")
    space_replacement = _check_normalizer(tok.get("normalizer"))
    _check_pre_tokenizer(tok.get("pre_tokenizer"))
    model = tok.get("model")
    if not isinstance(model, dict):
        raise _OutOfFamily("model", "is missing or not an object")
    _check_model_options(model)
    vocab = _vocab(model.get("vocab"))
    merges = _merges(model.get("merges"), vocab)
    unk = model.get("unk_token")
    if unk is not None and (not isinstance(unk, str) or unk not in vocab):
        raise _OutOfFamily("model.unk_token", f"{unk!r} is not a token of model.vocab")
    added_tokens, added_ids = _added_tokens(tok.get("added_tokens", []), vocab)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    dense = all(i == token_id for i, (_, token_id) in enumerate(by_id))
    return {
        "vocab": [token for token, _ in by_id],
        "vocab_ids": None if dense else [token_id for _, token_id in by_id],
        "merges": merges,
        "added_tokens": added_tokens,
        "added_token_ids": added_ids,
        "unk_id": -1 if unk is None else vocab[unk],
        "fuse_unk": model.get("fuse_unk") or False,
        "byte_fallback": model.get("byte_fallback") or False,
        "space_replacement": space_replacement,
    }


def _single(step, key: str):
    """A Sequence of exactly one step is that step."""
    if isinstance(step, dict) and step.get("type") == "Sequence" and isinstance(step.get(key), list) \
            and len(step[key]) == 1:
        return step[key][0]
    return step


def _check_normalizer(normalizer) -> str:
    """The marker spaces become (the Replace normalizer's content)."""
    step = _single(normalizer, "normalizers")
    if not (isinstance(step, dict) and step.get("type") == "Replace" and step.get("pattern") == {"String": " "}
            and isinstance(step.get("content"), str)):
        kind = step.get("type") if isinstance(step, dict) else step
        raise _OutOfFamily("normalizer", f"must be Replace(String ' ' -> marker), got {kind!r}")
    if " " in step["content"]:
        raise _OutOfFamily("normalizer", f"the replacement {step['content']!r} contains a space")
    return step["content"]


def _check_pre_tokenizer(pre_tokenizer) -> None:
    step = _single(pre_tokenizer, "pretokenizers")
    if step is None:
        return
    if not (isinstance(step, dict) and step.get("type") == "Split" and step.get("pattern") == {"String": " "}
            and step.get("behavior") == "MergedWithPrevious" and step.get("invert") is False):
        kind = step.get("type") if isinstance(step, dict) else step
        raise _OutOfFamily("pre_tokenizer", f"must be none or Split(String ' ', MergedWithPrevious), got {kind!r}")


def _check_model_options(model: dict) -> None:
    if model.get("type") != "BPE":
        raise _OutOfFamily("model.type", f"must be 'BPE', got {model.get('type')!r}")
    if model.get("dropout") not in (None, 0, 0.0):
        raise _OutOfFamily("model.dropout", f"must be null (deterministic BPE), got {model['dropout']!r}")
    for field in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(field) not in (None, ""):
            raise _OutOfFamily(f"model.{field}", f"must be null or empty, got {model[field]!r}")
    if model.get("ignore_merges", False) is not False:
        raise _OutOfFamily("model.ignore_merges", f"must be false, got {model['ignore_merges']!r}")
    for field in ("fuse_unk", "byte_fallback"):
        if model.get(field) not in (None, True, False):
            raise _OutOfFamily(f"model.{field}", f"must be a boolean, got {model[field]!r}")


def _vocab(vocab) -> dict[str, int]:
    if not isinstance(vocab, dict) or not vocab:
        raise _OutOfFamily("model.vocab", "must be a non-empty object token -> id")
    seen: dict[int, str] = {}
    for token, token_id in vocab.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id <= MAX_ID:
            raise _OutOfFamily("model.vocab", f"token {token!r} has id {token_id!r}, not an integer in [0, {MAX_ID}]")
        if token_id in seen:
            raise _OutOfFamily("model.vocab", f"tokens {seen[token_id]!r} and {token!r} share id {token_id}")
        seen[token_id] = token
    return vocab


def _merges(merges, vocab: dict[str, int]) -> list[int]:
    """Flattened [left id, right id] in rank order; merges come as "a b" strings or [a, b] lists."""
    if merges is None:
        merges = []
    if not isinstance(merges, list):
        raise _OutOfFamily("model.merges", "must be a list")
    flat: list[int] = []
    append, id_of = flat.append, vocab.get  # half a million merges in Gemma3: keep the loop lean
    for i, merge in enumerate(merges):
        if isinstance(merge, str):
            if merge.startswith("#version"):  # the tokenizers library skips these lines
                continue
            parts = merge.split(" ")
        else:
            parts = merge
        if not (isinstance(parts, (list, tuple)) and len(parts) == 2 and isinstance(parts[0], str)
                and isinstance(parts[1], str)):
            raise _OutOfFamily(f"model.merges[{i}]", f"{merge!r} is not a pair of tokens ('a b' or [a, b])")
        left, right = parts
        left_id, right_id = id_of(left), id_of(right)
        if left_id is None or right_id is None or left + right not in vocab:
            missing = next(part for part in (left, right, left + right) if part not in vocab)
            raise _OutOfFamily(f"model.merges[{i}]", f"{merge!r}: {missing!r} is not in model.vocab")
        append(left_id)
        append(right_id)
    return flat


def _added_tokens(added, vocab: dict[str, int]) -> tuple[list[str], list[int]]:
    """Contents and ids of the added tokens; each id must be the one the tokenizers library gives
    the token when it loads the file (the vocab's id of its content, else the next free id from
    the vocab's size, in order), or the graph's ids would differ from the library's."""
    if not isinstance(added, list):
        raise _OutOfFamily("added_tokens", "must be a list")
    contents: list[str] = []
    ids: list[int] = []
    seen: set[str] = set()
    next_id = len(vocab)
    for i, entry in enumerate(added):
        field = f"added_tokens[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise _OutOfFamily(field, "is not an object with a string 'content'")
        content = entry["content"]
        for flag, default in (("normalized", True), ("lstrip", False), ("rstrip", False), ("single_word", False)):
            if entry.get(flag, default) is not False:
                raise _OutOfFamily(f"{field}.{flag}", f"must be false for {content!r}, got {entry.get(flag, default)!r}")
        if content == "":
            continue  # the tokenizers library ignores empty added tokens
        if content in seen:
            raise _OutOfFamily(f"{field}.content", f"{content!r} is added twice")
        if content in vocab:
            expected = vocab[content]
        else:
            expected, next_id = next_id, next_id + 1
        if entry.get("id") != expected:
            raise _OutOfFamily(f"{field}.id", f"{content!r} has id {entry.get('id')!r} but the tokenizers library "
                                              f"gives it {expected}")
        if expected > MAX_ID:
            raise _OutOfFamily(f"{field}.id", f"{expected} is beyond {MAX_ID}")
        seen.add(content)
        contents.append(content)
        ids.append(expected)
    return contents, ids


# -- ONNX schema ----------------------------------------------------------------------------------

def _infer(ctx) -> None:
    """input_ids, attention_mask: int64 [N, S], N from text; vocab is required."""
    import onnx

    if ctx.get_attribute("vocab") is None:
        raise onnx.shape_inference.InferenceError(f"{NAME}: attribute 'vocab' is required")
    text = ctx.get_input_type(0)
    dims = text.tensor_type.shape.dim if text is not None and text.tensor_type.HasField("shape") else None
    if dims is not None and len(dims) != 1:
        raise onnx.shape_inference.InferenceError(f"{NAME}: input 'text' must be 1-D [N], got rank {len(dims)}")
    for index in range(2):
        out = onnx.TypeProto()
        out.tensor_type.elem_type = onnx.TensorProto.INT64
        if dims is not None:
            out.tensor_type.shape.dim.add().CopyFrom(dims[0])
            out.tensor_type.shape.dim.add()
        ctx.set_output_type(index, out)


def schema(domain: str, version: int):
    return op_schema(
        NAME, domain, version, _DOC,
        inputs=[Param("text", "S", "[N] UTF-8 strings")],
        outputs=[Param("input_ids", "I", "[N, S] token ids, right-padded with 0 (S = the longest row)"),
                 Param("attention_mask", "I", "[N, S] 1 on real tokens, 0 on padding")],
        type_constraints=[("S", ["tensor(string)"], "strings"), ("I", ["tensor(int64)"], "int64")],
        attributes=[
            Attr("vocab", "1-D string tensor: the model's tokens (token i has id i, or vocab_ids[i])", kind="TENSOR",
                 required=True),
            Attr("vocab_ids", "id of each vocab token (absent: its position)", kind="INTS"),
            Attr("merges", "flattened [left id, right id] pairs in rank order (absent: none)", kind="INTS"),
            Attr("added_tokens", "1-D string tensor: tokens matched on the raw text", kind="TENSOR"),
            Attr("added_token_ids", "id of each added token", kind="INTS"),
            Attr("unk_id", "id of the unk token (-1: unknown characters are dropped)", default=-1),
            Attr("fuse_unk", "1: consecutive unknown characters give one unk", default=0),
            Attr("byte_fallback", "1: an unknown character becomes its UTF-8 byte tokens <0xXX>", default=0),
            Attr("space_replacement", "what each space becomes before BPE", default="\u2581"),
            Attr("max_length", "at most this many ids per row (0: no cap)", default=0),
        ],
        infer=_infer)
