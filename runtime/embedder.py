"""``Embedder``: embed texts with an exported folder, sentence-transformers style.

Texts are tokenized once, sorted by length and run in batches padded only to their own longest
text (dynamic padding), then put back in input order. Pooling, the Dense head and normalization
are in the graph; this class adds prompts, batching (runtime/memory.py's ``plan_batches``) and the
finishing of the rows (runtime/finishing.py: Matryoshka truncation, ``dimensions``; the output precision,
``precision``: int8 / uint8 / binary / ubinary, bitnet_onnx.precision).

One call embeds: ``encode(texts)``, or, for a caller that needs the token ids too (token counts,
a module that tokenizes before it runs), ``prepare(...)`` once (prompt resolved, texts tokenized
and truncated, options checked) and ``embed(prepared)`` to finished rows. The session, the
tokenizer and the finishing steps are private; the server batching many requests together
(runtime/server) is the one caller of ``run_batch`` and ``finish`` besides this module.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import ACTIVATION_BUDGET_BYTES, PROMPT_INPUT, PROMPT_LENGTH_INPUT, TEXT_INPUT, Manifest
from bitnet_onnx.precision import CALIBRATION_FILE, FLOAT32, calibration_ranges, write_ranges

from bitnet_onnx.runtime.finishing import Finishing, l2_normalize
from bitnet_onnx.runtime.memory import BatchMemory, plan_batches
from bitnet_onnx.runtime.session import MASK_OUTPUT, SENTENCE_OUTPUT, TOKEN_OUTPUT, create_session
from bitnet_onnx.runtime.tokenization import TOKENIZER_FILE, TextTokenizer, check_texts

OUTPUT_VALUES = (SENTENCE_OUTPUT, TOKEN_OUTPUT)
# Padded tokens per batch: 32 texts of 512 tokens; longer texts go in smaller batches, since the
# attention's memory grows with texts x length^2.
MAX_BATCH_TOKENS = 16384


@dataclass(frozen=True, eq=False)
class Prepared:
    """A request made ready once by ``Embedder.prepare``: what ``Embedder.embed`` (or a server's batcher,
    then ``Embedder.finish``) runs, and how its rows are finished."""

    ids: list[list[int]]  # token ids per text: prompt in front, specials and EOS as the export's rules say
    prompt_length: int  # leading tokens of every row the pooling leaves out (0: none, or it includes them)
    dimensions: int  # the width kept (Matryoshka)
    normalize: bool | None  # None: the manifest's choice
    precision: str  # bitnet_onnx.precision's name
    ranges: np.ndarray | None  # int8 / uint8: the calibration ranges of ``dimensions``
    pad: Callable = field(repr=False)  # the export's padding (TextTokenizer.pad)

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) int64 [texts, longest]: the ids as one session run takes them."""
        return self.pad(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def token_counts(self) -> list[int]:
        return [len(x) for x in self.ids]

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.ids)


@dataclass(frozen=True)
class _Texts:
    """What a run of many texts feeds, either kind of session: token id lists (``prompt`` None; the first
    ``skip`` tokens of each left out of the pooling), or texts for a strings-in graph, ``prompt`` its own
    input. ``lengths``: what batches are cut by (token counts, or a bound on them: UTF-8 bytes)."""

    items: list
    lengths: list[int]
    prompt: str | None = None
    skip: int = 0


class Embedder:
    """Embeds texts with the exported folder ``out_dir`` on ONNX Runtime's CPU provider.

    ``threads``: intra-op threads of the session (None: ONNX Runtime's default, all cores).
    ``max_batch_bytes``: activation memory one session run may take, by the export's cost model
    (runtime/memory.py): batches of long texts are cut to it; a text that alone needs more is an error.
    Stopping a run early is a per-call option (``run_options``: an ``onnxruntime.RunOptions`` whose
    ``terminate`` another thread may set), never a swap of the session.
    """

    def __init__(self, out_dir: str | Path, threads: int | None = None, max_batch_bytes: int = ACTIVATION_BUDGET_BYTES):
        self.folder = Path(out_dir)
        self.manifest = Manifest.read(self.folder)
        self.memory = BatchMemory(self.manifest, max_batch_bytes)
        self._tokenizer = TextTokenizer(self.folder / TOKENIZER_FILE, self.manifest)
        self.threads = threads
        self._finishing = Finishing(self.folder, self.manifest)  # width, normalization, precision of the rows
        # A strings-in export (--text-input): encode feeds texts to the graph's own tokenizer; the
        # token-ids session (prepare / embed, a server) is then created on first use.
        self._text_session = (create_session(self.folder, self.manifest, threads=threads, text=True)
                              if self.manifest.text_model_file else None)
        self._session = None if self._text_session else create_session(self.folder, self.manifest, threads=threads)

    def _ids_session(self):
        """The token-ids session (input_ids, attention_mask in)."""
        if self._session is None:
            self._session = create_session(self.folder, self.manifest, threads=self.threads)
        return self._session

    @property
    def text_input(self) -> bool:
        """True when ``encode`` feeds texts to the export's strings-in graph (export --text-input)."""
        return self._text_session is not None

    @property
    def dimension(self) -> int:
        """Width of a sentence embedding."""
        return int(self.manifest.dimension)

    @property
    def prompts(self) -> dict[str, str]:
        return dict(self.manifest.prompts)

    def get_sentence_embedding_dimension(self) -> int:  # sentence-transformers' name
        return self.dimension

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Embedder({str(self.folder)!r}, arch={m.arch}, weights={m.weights}, pooling={m.pooling}, "
                f"dimension={m.dimension}, threads={self.threads})")

    def encode(self, texts: str | Sequence[str], batch_size: int = 32, prompt_name: str | None = None,
               prompt: str | None = None, normalize: bool | None = None, dimensions: int | None = None,
               show_progress_bar: bool | None = None, output_value: str = SENTENCE_OUTPUT,
               max_batch_tokens: int = MAX_BATCH_TOKENS, precision: str | None = None, ranges=None):
        """Embeddings of ``texts``: float32 [len(texts), dim] in input order (1-D [dim] for one string).

        - ``prompt`` (a literal prefix) or ``prompt_name`` (a key of the manifest's prompts) is put
          before every text; with neither, the manifest's ``default_prompt_name`` applies.
        - ``normalize``: None keeps the manifest's choice (normalized in the graph or not); True
          L2-normalizes; False returns the graph's output as is.
        - ``dimensions``: keep the first N values (Matryoshka), renormalized when normalizing.
        - ``output_value="token_embeddings"``: a list of float32 [tokens_i, hidden] arrays, padding removed.
        - ``max_batch_tokens``: a batch of long texts holds fewer than ``batch_size`` texts, so that
          texts x padded length stays within this budget (one text always fits).
        - ``precision``: "float32" (None), "int8", "uint8" [n, dim], "binary", "ubinary" [n, ceil(dim/8)]:
          sentence-transformers' ``quantize_embeddings`` of the vectors, after ``dimensions`` and
          ``normalize``. int8 / uint8 scale by ``ranges`` (float32 [2, width], or a calibration file's
          path); without it, by the export folder's calibration_ranges.json (``calibrate``).
        """
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        batch_size = _positive_int(batch_size, "batch_size")
        max_batch_tokens = _positive_int(max_batch_tokens, "max_batch_tokens")
        if output_value not in OUTPUT_VALUES:
            raise BitnetOnnxError(f"output_value must be one of {', '.join(OUTPUT_VALUES)}, got {output_value!r}")
        if output_value == TOKEN_OUTPUT and precision not in (None, FLOAT32):
            raise BitnetOnnxError(f"precision {precision!r} applies to sentence embeddings, not {TOKEN_OUTPUT}")
        sentences = output_value == SENTENCE_OUTPUT
        options = self._finishing.options(dimensions, normalize, precision, ranges) if sentences else None
        run = self._texts(items, prompt_name, prompt)
        batches = plan_batches(run.lengths, batch_size, max_batch_tokens, self.memory)
        rows = self._run(run, batches, output_value, show_progress_bar)
        out = rows if options is None else self._finishing.rows(self._finishing.stack(rows), *options)
        return out[0] if single else out

    def _texts(self, texts: Sequence[str], prompt_name: str | None, prompt: str | None) -> _Texts:
        """``texts`` with the prompt in front, as this export's session takes them: token ids (tokenized here,
        batched by token count), or, on a strings-in export, the texts themselves for the graph's tokenizer
        (batched by a bound on their tokens: UTF-8 bytes + prompt + specials, at most max_length)."""
        if self._text_session is None:
            prepared = self._prepare_texts(texts, prompt_name, prompt, True)
            return _Texts(prepared.ids, prepared.token_counts, None, prepared.prompt_length)
        prefix = self._prompt(prompt_name, prompt)
        inputs = check_texts(texts)
        prefix_bytes = len(prefix.encode("utf-8"))
        bound = [min(len(t.encode("utf-8")) + prefix_bytes + 2, int(self.manifest.max_length)) for t in inputs]
        return _Texts(inputs, bound, prefix)

    def prepare(self, texts: Sequence[str] | None = None, *, ids: Sequence[Sequence[int]] | None = None,
                prompt_name: str | None = None, prompt: str | None = None, truncate: bool = True,
                dimensions: int | None = None, normalize: bool | None = None, precision: str | None = None,
                ranges=None) -> Prepared:
        """A request made ready once for ``embed``: ``texts`` tokenized with the prompt in front (rules as
        in ``encode``; the prompt resolved once, and its length for the pooling), or ``ids`` (token id
        lists, as the tokenizer gives them for a text: no prompt; EOS appended for last-token pooling
        unless already last, each id checked against the vocabulary). ``truncate=False`` raises
        ``TooLongError`` for an item over the manifest's max_length. ``dimensions``, ``normalize``,
        ``precision`` and ``ranges`` as in ``encode``, checked here, before anything runs."""
        if (texts is None) == (ids is None):
            raise BitnetOnnxError("prepare takes texts or ids (one of them)")
        if texts is not None:
            prepared = self._prepare_texts(texts, prompt_name, prompt, truncate)
        else:
            if prompt_name is not None or prompt is not None:
                raise BitnetOnnxError("token ids take no prompt: put the prompt's ids in front of them")
            prepared = Prepared(self._tokenizer.prepare_ids(ids, truncate=truncate), 0, self.dimension, None,
                                FLOAT32, None, self._tokenizer.pad)
        width, normalize, name, resolved = self._finishing.options(dimensions, normalize, precision, ranges)
        return replace(prepared, dimensions=width, normalize=normalize, precision=name, ranges=resolved)

    def embed(self, prepared: Prepared, batch_size: int = 32, max_batch_tokens: int = MAX_BATCH_TOKENS,
              show_progress_bar: bool | None = None, run_options=None) -> np.ndarray:
        """The finished rows of ``prepared`` (``encode``'s output for it): its texts run in length-sorted
        batches of at most ``batch_size`` texts and ``max_batch_tokens`` padded tokens, then the first
        ``dimensions`` values, normalization and the precision. ``run_options``: an
        ``onnxruntime.RunOptions`` for every session run (setting its ``terminate`` stops the call)."""
        batches = plan_batches(prepared.token_counts, _positive_int(batch_size, "batch_size"),
                               _positive_int(max_batch_tokens, "max_batch_tokens"), self.memory)
        run = _Texts(prepared.ids, prepared.token_counts, None, prepared.prompt_length)
        rows = self._run(run, batches, SENTENCE_OUTPUT, show_progress_bar, run_options)
        return self.finish(prepared, self._finishing.stack(rows))

    def tokenize(self, texts: Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
                 truncate: bool = True) -> list[list[int]]:
        """Token ids of ``texts`` with the prompt put before each (rules as in ``encode``), unpadded.
        ``truncate=False`` raises ``TooLongError`` for a text over the manifest's max_length."""
        return self._tokenize(self._prompt(prompt_name, prompt), texts, truncate)

    def _tokenize(self, prefix: str, texts: Sequence[str], truncate: bool) -> list[list[int]]:
        return self._tokenizer.tokenize([prefix + t for t in check_texts(texts)], truncate=truncate)

    def _prepare_texts(self, texts: Sequence[str], prompt_name: str | None, prompt: str | None,
                       truncate: bool) -> Prepared:
        """Texts' ids (the prompt resolved once, in front of each) and the prompt's length for the pooling;
        the finishing options at their defaults."""
        prefix = self._prompt(prompt_name, prompt)
        return Prepared(self._tokenize(prefix, texts, truncate), self.prompt_length(prefix), self.dimension, None,
                        FLOAT32, None, self._tokenizer.pad)

    def resolve_prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The prefix ``encode`` / ``tokenize`` put before each text for these arguments (neither given:
        the manifest's default prompt, if any)."""
        return self._prompt(prompt_name, prompt)

    # The server's two steps (runtime/server batches the texts of many requests together): one session
    # run on a batch of ids from many prepared requests, then each request's rows finished.

    def run_batch(self, ids: Sequence[Sequence[int]], prompt_lengths: Sequence[int] | None = None,
                  run_options=None) -> np.ndarray:
        """One session run on token id lists padded to the longest: float32 [len(ids), dimension],
        the graph's sentence embeddings (before ``finish``). ``prompt_lengths``: per row, the
        ``prompt_length`` of its request, for models whose pooling leaves the prompt out (None: 0).
        ``run_options``: the run's ``onnxruntime.RunOptions`` (another thread may stop it)."""
        input_ids, mask = self._tokenizer.pad(ids)
        (values,) = self._ids_session().run([SENTENCE_OUTPUT], self._feed(input_ids, mask, prompt_lengths),
                                            run_options)
        return values

    def finish(self, prepared: Prepared, rows: np.ndarray) -> np.ndarray:
        """``run_batch``'s rows of ``prepared``'s texts [len(prepared), dimension], in its order -> its
        finished rows: the first ``dimensions`` values, normalization, then the precision."""
        return self._finishing.rows(rows, prepared.dimensions, prepared.normalize, prepared.precision,
                                    prepared.ranges)

    @property
    def pools_without_prompt(self) -> bool:
        """True when the model's pooling leaves the prompt's tokens out (include_prompt: false)."""
        return any(i.name == PROMPT_LENGTH_INPUT for i in self._ids_session().get_inputs())

    def prompt_length(self, prompt: str) -> int:
        """Leading tokens the pooling leaves out for texts with ``prompt`` in front, counted as
        sentence-transformers does: the prompt's own tokens (tokenizer.json's specials included)
        minus one. 0 without a prompt or for models whose pooling includes the prompt."""
        if not prompt or not self.pools_without_prompt:
            return 0
        return max(len(self._tokenizer.encode_plain(prompt)) - 1, 0)

    def _feed(self, input_ids: np.ndarray, mask: np.ndarray, prompt_lengths: Sequence[int] | None) -> dict:
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if self.pools_without_prompt:
            lengths = [0] * len(input_ids) if prompt_lengths is None else list(prompt_lengths)
            feed[PROMPT_LENGTH_INPUT] = np.asarray(lengths, dtype=np.int64).reshape(len(input_ids))
        return feed

    # The finishing steps (runtime/finishing.py), public as sentence-transformers users call them.

    @property
    def graph_precision(self) -> str:
        """The precision of the graph's sentence_embedding (the manifest's output_precision)."""
        return self._finishing.graph_precision

    def check_dimensions(self, dimensions: int | None) -> int:
        """The width a call's ``dimensions`` keeps (None: the full dimension), or an error naming the range."""
        return self._finishing.check_dimensions(dimensions)

    def check_precision(self, precision: str | None, ranges, width: int) -> tuple[str, np.ndarray | None]:
        """(precision's name, its ranges for ``width``) for ``quantize``, or an error naming the fault, so
        a caller can check both before any text is embedded."""
        return self._finishing.check_precision(precision, ranges, width)

    def quantize(self, rows: np.ndarray, precision: str | None = None, ranges=None) -> np.ndarray:
        """float32 embeddings [n, width] (``encode``'s) -> ``precision``'s values (bitnet_onnx.precision), with
        ``ranges`` or, for int8 / uint8 without them, the folder's calibration file's ranges of ``width``."""
        return self._finishing.quantize(rows, precision, ranges)

    def ranges(self, width: int, given=None):
        """The calibration ranges for ``width``: ``given`` (an array [2, width], or a calibration file's path),
        else the folder's calibration_ranges.json row for it (None without that file)."""
        return self._finishing.ranges(width, given)

    def calibration(self, path: str | Path | None = None) -> dict[int, np.ndarray]:
        """The calibration file ``path`` (default: the folder's calibration_ranges.json) as width -> float32
        [2, width], read once per embedder (``calibrate`` forgets what it rewrites)."""
        return self._finishing.calibration(path)

    def calibrate(self, texts: Sequence[str], dimensions: Sequence[int | None] = (None,), path=None,
                  **encode_kwargs) -> dict[int, np.ndarray]:
        """Calibration ranges (width -> float32 [2, width], each dimension's min and max) from the
        embeddings of ``texts`` at each of ``dimensions`` (None: the full width), computed once and
        kept: written to ``path`` (default: the folder's calibration_ranges.json, merged with the widths
        already there), which int8 / uint8 then use. ``encode_kwargs`` go to ``encode`` (prompt, ...)."""
        if isinstance(texts, str) or len(texts) < 2:
            raise BitnetOnnxError("calibrate needs at least 2 texts (the more, the better the ranges)")
        widths = [self.check_dimensions(d) for d in dimensions]
        if self.graph_precision != FLOAT32:
            raise BitnetOnnxError(f"{self.folder} outputs {self.graph_precision} embeddings from its graph; "
                                  "calibrate a float32 export")
        normalize = encode_kwargs.pop("normalize", None)
        full = self.encode(list(texts), normalize=False, **encode_kwargs)  # one run: every width from it
        table = {w: calibration_ranges(self._finishing.truncate(full, w, normalize)) for w in widths}
        write_ranges(path or self.folder / CALIBRATION_FILE, table, {"texts": len(texts)})
        self._finishing.forget_calibrations()
        return table

    def encode_query(self, texts: str | Sequence[str], **kwargs):
        """``encode`` with the manifest's "query" prompt (when it has one), like sentence-transformers 5."""
        return self.encode(texts, **self._named_prompt("query", kwargs))

    def encode_document(self, texts: str | Sequence[str], **kwargs):
        """``encode`` with the manifest's "document" (or "passage") prompt, when it has one."""
        return self.encode(texts, **self._named_prompt("document", kwargs, fallback="passage"))

    def _named_prompt(self, name: str, kwargs: dict, fallback: str | None = None) -> dict:
        if "prompt" in kwargs or "prompt_name" in kwargs:
            return kwargs
        for candidate in (name, fallback):
            if candidate in self.manifest.prompts:
                return {**kwargs, "prompt_name": candidate}
        return {**kwargs, "prompt": ""}  # no such prompt: plain texts, not the default prompt

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Cosine similarity matrix [len(a), len(b)] of two sets of embeddings (1-D inputs count as one row)."""
        a, b = (np.atleast_2d(np.asarray(x, dtype=np.float32)) for x in (a, b))
        return l2_normalize(a) @ l2_normalize(b).T

    def _run(self, run: _Texts, batches: list[list[int]], output: str, show_progress_bar: bool | None,
             run_options=None) -> list:
        """``output`` of ``run``'s items in ``batches`` (lists of item indices), on the session of its kind;
        one array per item, in input order (token embeddings without their padding)."""
        from tqdm.auto import tqdm

        items = run.items
        results: list = [None] * len(items)
        bar = tqdm(total=len(items), unit="text", desc="embed", file=sys.stderr,
                   disable=not show_progress_bar, leave=False, delay=1.0)
        with bar:
            for chunk in batches:
                if run.prompt is not None:
                    feed = {TEXT_INPUT: np.array([items[i] for i in chunk], dtype=object),
                            PROMPT_INPUT: np.array([run.prompt], dtype=object)}
                    values, mask = self._text_session.run([output, MASK_OUTPUT], feed, run_options)
                elif output == SENTENCE_OUTPUT:
                    values, mask = self.run_batch([items[i] for i in chunk], [run.skip] * len(chunk), run_options), None
                else:
                    input_ids, mask = self._tokenizer.pad([items[i] for i in chunk])
                    (values,) = self._ids_session().run([output], self._feed(input_ids, mask, [run.skip] * len(chunk)),
                                                        run_options)
                for row, i in enumerate(chunk):
                    results[i] = values[row] if output == SENTENCE_OUTPUT else values[row][mask[row] == 1]
                bar.update(len(chunk))
        return results

    def _prompt(self, prompt_name: str | None, prompt: str | None) -> str:
        if prompt is not None:
            if not isinstance(prompt, str):
                raise BitnetOnnxError(f"prompt must be a string, got {type(prompt).__name__}")
            return prompt
        prompts = self.manifest.prompts
        name = prompt_name if prompt_name is not None else self.manifest.default_prompt_name
        if name is None:
            return ""
        if name not in prompts:
            known = ", ".join(sorted(prompts)) or "none"
            raise BitnetOnnxError(f"prompt_name {name!r} is not in {self.folder / 'bitnet_onnx.json'} "
                                  f"(prompts: {known})")
        return prompts[name]

def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise BitnetOnnxError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
