"""The bad-input corpus as data: what each case breaks, how it runs and what it must answer.

Each case runs in a fresh workspace (``Workspace``: private copies of the session's tiny model,
export and GGUF file in the test's tmp folder), as a process of its own running ``python -m
bitnet_onnx`` with the workspace as its working directory: a fork of a server that has done the imports
already (fork_server.py), or a cold interpreter for the cases about its start (``cold``).
test_corpus.py asserts for every case: the exit status, one line on stderr matching ``error`` (which
names the culprit), every input unchanged and nothing left behind (no new or hidden temp entries)
unless the case lists what it ``creates``.

Classes (``CLASSES``; 1-5 from issue 16, 6-9 from issue 23).

Placeholders in ``argv``: {model} (qwen3, float32), {gemma} (gemma3), {export} (an f32 export of
{model}), {external} ({export} with its weights in model.onnx.data), {gguf} (an f16 GGUF of
{model}). Paths are relative to the workspace, so messages name them as the user typed them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

CLASSES = {
    1: "output locations",
    2: "invalid configs and weights",
    3: "signals",
    4: "resource exhaustion",
    5: "one-line errors for corrupt files and failing writes",
    6: "inputs that are not regular files (a FIFO, a device): refused by name, never a hang",
    7: "outputs other users can read: every file and folder gets the umask's mode",
    8: "one line where Python would print a traceback (symlink loops, Ctrl-C during imports)",
    9: "messages that name the cause (the OS reason and the numbers of a failed write)",
}
EXIT_ERROR = 1
FIVE_MB_LINE = b"word " * (1 << 20)  # one text line of 5 MiB
GGUF_MAGIC = b"GGUF"
GGUF_UINT8, GGUF_UINT32, GGUF_STRING, GGUF_ARRAY = 0, 4, 8, 9


@dataclass
class Workspace:
    """The case's working folder; ``sources`` copies a shared input in on first use."""
    root: Path
    sources: dict[str, Path]  # placeholder -> shared read-only folder or file
    copied: dict[str, Path] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Path:
        if name in ("root", "sources", "copied"):
            raise AttributeError(name)
        if name not in self.copied:
            if name not in self.sources:
                raise AttributeError(name)
            src, dst = self.sources[name], self.root / name
            if src.is_dir():
                import shutil

                shutil.copytree(src, dst)
            else:
                dst.write_bytes(src.read_bytes())
            self.copied[name] = dst
        return self.copied[name]

    def format(self, arg: str) -> str:
        for name in self.sources:
            if "{" + name + "}" in arg:
                getattr(self, name)  # copy it in
                arg = arg.replace("{" + name + "}", name)
        return arg


@dataclass
class Case:
    id: str
    cls: int  # the class of issue 16 it belongs to (1-5)
    argv: list[str]  # bitnet-onnx arguments, with placeholders
    error: str | None = None  # regex the one stderr line must match (search); None: no line required
    setup: Callable[[Workspace], None] | None = None
    status: int | tuple[int, ...] = EXIT_ERROR
    stdin: bytes | None = None
    # hold the named function open (tests/bad_inputs/hold.py) until GO; then ``signal`` is sent, or
    # ``meanwhile`` runs and GO is created
    hold: str | None = None
    wait_for: str | None = None  # glob (in the workspace) that exists once the temp output is there
    wait_held: bool = False  # instead of wait_for: until the held function is holding (no temp output yet)
    signal: int | None = None
    meanwhile: Callable[[Workspace], None] | None = None
    runs: int = 1  # >1: the same argv run concurrently (all held until their temp outputs exist)
    fsize: int | None = None  # RLIMIT_FSIZE bytes (SIGXFSZ ignored: writes fail with EFBIG)
    memory: int | None = None  # RLIMIT_AS bytes
    umask: int | None = None
    creates: tuple[str, ...] = ()  # workspace entries a successful run adds (with everything under them)
    check: Callable[[Workspace], None] | None = None  # more assertions after the run
    timeout: float = 120
    # True: a cold interpreter (``python -m bitnet_onnx``). Otherwise a fork of the session's pre-imported
    # server (fork_server.py), its own process all the same, for a case not about the interpreter's start
    cold: bool = False


# ---- setup helpers ----------------------------------------------------------------------------

def edit_json(rel: str, **changes) -> Callable[[Workspace], None]:
    """Set (value) or delete (the DELETE marker) keys of a JSON file of the workspace."""
    def setup(ws: Workspace) -> None:
        root, _, _ = rel.partition("/")
        getattr(ws, root)
        path = ws.root / rel
        data = json.loads(path.read_text())
        for key, value in changes.items():
            target, _, leaf = key.rpartition("__")
            obj = data
            for part in filter(None, target.split("__")):
                obj = obj[part]
            if value is DELETE:
                obj.pop(leaf, None)
            else:
                obj[leaf] = value
        path.write_text(json.dumps(data))
    return setup


DELETE = object()


def write(rel: str, content: bytes | str) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        getattr(ws, rel.partition("/")[0])
        path = ws.root / rel
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return setup


def written(id: str, argv: list[str], rel: str, content: bytes | str, error: str) -> Case:
    """A class-2 case: the workspace file ``rel`` holds ``content``, and the one line names the file and says
    ``error`` (a regex) about it."""
    return Case(id, 2, argv, rf"{re.escape(rel)}: {error}", setup=write(rel, content))


def replace_with_dir(rel: str) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        getattr(ws, rel.partition("/")[0])
        path = ws.root / rel
        path.unlink()
        path.mkdir()
        (path / "keep").write_text("a folder where a file belongs\n")
    return setup


def symlink_loop(rel: str) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        getattr(ws, rel.partition("/")[0])
        path = ws.root / rel
        path.unlink()
        loop = path.with_name("loop.json")
        os.symlink(loop.name, path)
        os.symlink(path.name, loop)
    return setup


def _replace(rel: str, make: Callable[[Path], None]) -> Callable[[Workspace], None]:
    """``rel`` (a file of a copied input, or a new name) replaced by what ``make(path)`` creates."""
    def setup(ws: Workspace) -> None:
        root = rel.partition("/")[0]
        if root in ws.sources:
            getattr(ws, root)  # copies the input first
        path = ws.root / rel
        if os.path.lexists(path):
            path.unlink()
        make(path)
    return setup


def fifo(rel: str) -> Callable[[Workspace], None]:
    """``rel`` replaced by a FIFO nobody writes to: opening it for reading blocks until a writer
    comes, which never happens."""
    return _replace(rel, os.mkfifo)


def link(rel: str, target: str) -> Callable[[Workspace], None]:
    """``rel`` replaced by a symlink to ``target``."""
    return _replace(rel, lambda path: os.symlink(target, path))


def loop(rel: str) -> Callable[[Workspace], None]:
    """``rel`` and ``rel``.other: two symlinks naming each other (a folder or file path that loops)."""
    def setup(ws: Workspace) -> None:
        path = ws.root / rel
        os.symlink(path.name + ".other", path)
        os.symlink(path.name, path.with_name(path.name + ".other"))
    return setup


def sparse(rel: str, size: int) -> Callable[[Workspace], None]:
    """``rel`` of a copied input replaced by ``size`` bytes of zeros that take no disk space."""
    def setup(ws: Workspace) -> None:
        getattr(ws, rel.partition("/")[0])
        with open(ws.root / rel, "r+b" if (ws.root / rel).exists() else "wb") as f:
            f.truncate(size)
    return setup


def truncate(rel: str, keep: int | float) -> Callable[[Workspace], None]:
    """Keep ``keep`` bytes (an int) or that fraction of the file (a float)."""
    def setup(ws: Workspace) -> None:
        getattr(ws, rel.partition("/")[0])
        path = ws.root / rel
        data = path.read_bytes()
        n = keep if isinstance(keep, int) else int(len(data) * keep)
        path.write_bytes(data[:n])
    return setup


def mkdir(rel: str, with_file: bool = True) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        path = ws.root / rel
        path.mkdir(parents=True)
        if with_file:
            (path / "notes.txt").write_text("someone else's work\n")
    return setup


def both(*setups: Callable[[Workspace], None]) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        for s in setups:
            s(ws)
    return setup


def edit_tensors(edit: Callable[[dict[str, np.ndarray]], None]) -> Callable[[Workspace], None]:
    """Rewrite {model}/model.safetensors after ``edit`` changed its tensors (a dict, edited in place)."""
    def setup(ws: Workspace) -> None:
        from safetensors.numpy import load_file, save_file

        path = ws.model / "model.safetensors"
        tensors = load_file(str(path))
        edit(tensors)
        save_file(tensors, str(path))
    return setup


def _embedding(tensors: dict) -> str:
    return next(n for n in tensors if n.endswith("embed_tokens.weight"))


def _projection(tensors: dict) -> str:
    return next(n for n in tensors if n.endswith("layers.0.mlp.up_proj.weight"))


def set_value(pick: Callable[[dict], str], value: float) -> Callable[[dict], None]:
    def edit(tensors: dict) -> None:
        name = pick(tensors)
        t = tensors[name].copy()
        t.flat[3] = value
        tensors[name] = t
    return edit


def shrink_vocab(rows: int) -> Callable[[Workspace], None]:
    """A model whose embedding and config.json agree on ``rows`` tokens, fewer than the tokenizer's."""
    def edit(tensors: dict) -> None:
        name = _embedding(tensors)
        tensors[name] = np.ascontiguousarray(tensors[name][:rows])
    return both(edit_tensors(edit), edit_json("model/config.json", vocab_size=rows))


def safetensors_header(header: bytes, declared: int | None = None) -> Callable[[Workspace], None]:
    """{model}/model.safetensors replaced by a header of ``declared`` (default: its own) length."""
    n = len(header) if declared is None else declared
    return write("model/model.safetensors", struct.pack("<Q", n) + header)


def gguf_file(kvs: list[bytes], n_tensors: int = 0, tail: bytes = b"") -> bytes:
    """A GGUF v3 header with the given encoded key/value pairs."""
    return GGUF_MAGIC + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs) + tail


def gguf_str(s: str, declared: int | None = None) -> bytes:
    data = s.encode()
    return struct.pack("<Q", len(data) if declared is None else declared) + data


def gguf_array(key: str, item_type: int, count: int, items: bytes = b"") -> bytes:
    return gguf_str(key) + struct.pack("<IIQ", GGUF_ARRAY, item_type, count) + items


def gguf_tensor(name: str, ne: tuple[int, ...], kind: int, offset: int = 0) -> bytes:
    return gguf_str(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, kind, offset)


def manifest_field_removed(name: str) -> Callable[[Workspace], None]:
    return edit_json("export/bitnet_onnx.json", **{name: DELETE})


def texts_file(rel: str, content: bytes) -> Callable[[Workspace], None]:
    def setup(ws: Workspace) -> None:
        (ws.root / rel).write_bytes(content)
    return setup


def appear(rel: str) -> Callable[[Workspace], None]:
    """A foreign folder created at the output path while the run is writing."""
    return mkdir(rel)


def assert_modes(*rels: str, umask: int) -> Callable[[Workspace], None]:
    """Files and folders of the output have the usual permissions under ``umask``."""
    def check(ws: Workspace) -> None:
        for rel in rels:
            for path in [ws.root / rel, *sorted((ws.root / rel).rglob("*"))]:
                want = (0o777 if path.is_dir() else 0o666) & ~umask
                got = path.stat().st_mode & 0o777
                assert got == want, f"{path}: mode {got:o}, expected {want:o}"
    return check


def foreign_intact(rel: str) -> Callable[[Workspace], None]:
    """The folder that appeared meanwhile holds exactly what its owner put there."""
    def check(ws: Workspace) -> None:
        entries = sorted(p.name for p in (ws.root / rel).iterdir())
        assert entries == ["notes.txt"], f"{rel}: {entries}"
    return check


def assert_one_of(*rels: str) -> Callable[[Workspace], None]:
    """Exactly one of the concurrent writers' results: a complete export."""
    def check(ws: Workspace) -> None:
        from bitnet_onnx.manifest import Manifest

        for rel in rels:
            Manifest.read(ws.root / rel)
            assert (ws.root / rel / "model.onnx").is_file()
    return check


# ---- the cases --------------------------------------------------------------------------------

EXPORT = ["export", "{model}", "--weights", "f32"]
CONVERT = ["convert-gguf", "{model}", "--outtype", "f16", "--pre-tokenizer", "qwen2"]
EMBED = ["embed", "{export}", "a cat sat on the mat"]
DATASET = ["embed-dataset", "{export}"]
TEXTS = texts_file("texts.jsonl", b'{"text": "a cat"}\n{"text": "a dog"}\n')
TEXTS_AT_T = texts_file("t.jsonl", b'{"text": "a cat", "id": 1}\n{"text": "a dog", "id": 2}\n')

OUTPUT_CASES = [
    Case("export-output-is-model", 1, EXPORT + ["-o", "{model}", "--overwrite"], r"-o/--output model is the input model"),
    Case("export-output-contains-model", 1, EXPORT + ["-o", ".", "--overwrite"], r"-o/--output \. contains the input model"),
    Case("export-output-inside-model", 1, EXPORT + ["-o", "{model}/onnx"], r"-o/--output model/onnx is inside the input folder model"),
    Case("export-output-inside-model-overwrite", 1, EXPORT + ["-o", "{model}/1_Pooling", "--overwrite"], r"is inside the input folder model"),
    Case("export-output-symlink-to-model", 1, EXPORT + ["-o", "link", "--overwrite"], r"-o/--output link is the input model",
         setup=lambda ws: os.symlink(ws.model.name, ws.root / "link")),
    Case("export-output-is-gguf-input", 1, ["export", "{gguf}", "-o", "{gguf}", "--overwrite"], r"-o/--output gguf is the input gguf"),
    Case("export-foreign-folder-overwrite", 1, EXPORT + ["-o", "theirs", "--overwrite"],
         r"theirs: exists and was not written by bitnet-onnx", setup=mkdir("theirs")),
    Case("export-foreign-empty-folder-overwrite", 1, EXPORT + ["-o", "theirs", "--overwrite"],
         r"theirs: exists and was not written by bitnet-onnx", setup=mkdir("theirs", with_file=False)),
    Case("export-foreign-file-overwrite", 1, EXPORT + ["-o", "notes.txt", "--overwrite"],
         r"notes\.txt: exists and is not a folder", setup=texts_file("notes.txt", b"mine\n")),
    Case("export-existing-without-overwrite", 1, EXPORT + ["-o", "{export}"], r"export: already exists; pass --overwrite"),
    Case("export-output-symlink-to-export", 1, EXPORT + ["-o", "link", "--overwrite"], r"link: exists and is not a folder",
         setup=lambda ws: os.symlink(ws.export.name, ws.root / "link")),
    Case("convert-outfile-is-checkpoint", 1, CONVERT + ["--outfile", "{model}/model.safetensors"],
         r"--outfile model/model\.safetensors exists and is not a GGUF file"),
    Case("convert-outfile-is-config", 1, CONVERT + ["--outfile", "{model}/config.json"],
         r"--outfile model/config\.json exists and is not a GGUF file"),
    Case("convert-outfile-foreign-gguf-name", 1, CONVERT + ["--outfile", "notes.gguf"],
         r"--outfile notes\.gguf exists and is not a GGUF file", setup=texts_file("notes.gguf", b"not a gguf\n")),
    Case("convert-outfile-is-folder", 1, CONVERT + ["--outfile", "{export}"], r"export.* (is a directory|not a GGUF)"),
    Case("convert-outfile-folder-missing", 1, CONVERT + ["--outfile", "nowhere/m.gguf"], r"nowhere/m\.gguf: folder nowhere does not exist"),
    Case("embed-output-is-manifest", 1, EMBED + ["--output", "{export}/bitnet_onnx.json"],
         r"--output export/bitnet_onnx\.json is inside the input folder export"),
    Case("embed-output-new-file-in-export", 1, EMBED + ["--output", "{export}/vectors.npy"],
         r"--output export/vectors\.npy is inside the input folder export"),
    Case("embed-output-is-input", 1, ["embed", "{export}", "--input", "texts.jsonl", "--output", "texts.jsonl"],
         r"--output texts\.jsonl is the input texts\.jsonl", setup=TEXTS),
    Case("embed-output-is-folder", 1, EMBED + ["--output", "out.npy"], r"--output out\.npy is a directory",
         setup=mkdir("out.npy")),
    Case("embed-output-folder-missing", 1, EMBED + ["--output", "nowhere/v.npy"], r"nowhere/v\.npy: folder nowhere does not exist"),
    Case("dataset-output-is-export", 1, DATASET + ["texts.jsonl", "{export}"], r"OUTPUT_DIR export is the input export", setup=TEXTS),
    Case("dataset-output-contains-inputs", 1, DATASET + ["texts.jsonl", "."], r"OUTPUT_DIR \. contains the input", setup=TEXTS),
    Case("dataset-output-inside-export", 1, DATASET + ["texts.jsonl", "{export}/parts"],
         r"OUTPUT_DIR export/parts is inside the input folder export", setup=TEXTS),
    Case("dataset-output-is-input-file", 1, DATASET + ["texts.jsonl", "texts.jsonl"], r"OUTPUT_DIR texts\.jsonl is the input", setup=TEXTS),
    Case("dataset-output-foreign-folder", 1, DATASET + ["texts.jsonl", "theirs"], r"theirs: a non-empty folder not written by embed-dataset",
         setup=both(TEXTS, mkdir("theirs"))),
    # the final rename never replaces what appeared meanwhile; two writers: exactly one wins
    Case("export-folder-appears-meanwhile", 1, EXPORT + ["-o", "out"], r"out: appeared while this run was writing",
         hold="bitnet_onnx.export.writer:save_model", wait_for=".out.tmp-*", meanwhile=appear("out"), creates=("out",),
         check=foreign_intact("out")),
    Case("export-overwrite-folder-appears-meanwhile", 1, EXPORT + ["-o", "out", "--overwrite"], r"out: appeared while this run was writing",
         hold="bitnet_onnx.export.writer:save_model", wait_for=".out.tmp-*", meanwhile=appear("out"), creates=("out",),
         check=foreign_intact("out")),
    Case("convert-file-appears-meanwhile", 1, CONVERT + ["--outfile", "m.gguf"], r"--outfile m\.gguf: appeared while this run was writing",
         hold="bitnet_onnx.convert_gguf.writer:tensor_data", wait_for=".m.gguf.*.tmp", meanwhile=appear("m.gguf"), creates=("m.gguf",),
         check=foreign_intact("m.gguf")),
    Case("embed-file-appears-meanwhile", 1, EMBED + ["--output", "v.json"], r"--output v\.json: appeared while this run was writing",
         hold="bitnet_onnx.commands.embed:_write_json", wait_for=".v.json.*.tmp", meanwhile=appear("v.json"), creates=("v.json",),
         check=foreign_intact("v.json")),
    Case("two-exports-race", 1, EXPORT + ["-o", "out"], r"out: appeared while this run was writing", runs=2, status=(0, 1),
         hold="bitnet_onnx.export.writer:save_model", wait_for=".out.tmp-*", creates=("out",), check=assert_one_of("out")),
]

CONFIG = "model/config.json"
CONFIG_CASES = [
    Case("kv-heads-not-dividing-heads", 2, EXPORT + ["-o", "out"], r"config\.json: num_key_value_heads 3 does not divide num_attention_heads 4",
         setup=edit_json(CONFIG, num_key_value_heads=3)),
    Case("kv-heads-not-dividing-heads-gguf", 2, CONVERT + ["--outfile", "m.gguf"], r"config\.json: num_key_value_heads 3 does not divide",
         setup=edit_json(CONFIG, num_key_value_heads=3)),
    Case("vocab-below-tokenizer-ids", 2, EXPORT + ["-o", "out"], r"tokenizer\.json.*token id \d+ .*vocab_size 300",
         setup=shrink_vocab(300)),
    Case("vocab-below-tokenizer-ids-gguf", 2, CONVERT + ["--outfile", "m.gguf"], r"tokenizer\.json: token id \d+ is not below config\.json vocab_size 300",
         setup=shrink_vocab(300)),
    Case("rope-theta-zero", 2, EXPORT + ["-o", "out"], r"config\.json: 'rope_theta' must be a positive finite number, got 0",
         setup=edit_json(CONFIG, rope_parameters__rope_theta=0)),
    Case("rope-theta-zero-gguf", 2, CONVERT + ["--outfile", "m.gguf"], r"config\.json: 'rope_theta' must be a positive",
         setup=edit_json(CONFIG, rope_parameters__rope_theta=0)),
    Case("rope-theta-string", 2, EXPORT + ["-o", "out"], r"config\.json: 'rope_theta' must be a positive finite number, got 'big'",
         setup=edit_json(CONFIG, rope_parameters__rope_theta="big")),
    Case("rms-norm-eps-negative", 2, EXPORT + ["-o", "out"], r"config\.json: 'rms_norm_eps' must be a positive finite number, got -1e-06",
         setup=edit_json(CONFIG, rms_norm_eps=-1e-6)),
    Case("rms-norm-eps-nan", 2, EXPORT + ["-o", "out"], r"config\.json: 'rms_norm_eps' must be a positive finite number, got nan",
         setup=edit_json(CONFIG, rms_norm_eps=float("nan"))),
    Case("max-positions-zero", 2, EXPORT + ["-o", "out"], r"config\.json: 'max_position_embeddings' must be a positive integer, got 0",
         setup=edit_json(CONFIG, max_position_embeddings=0)),
    Case("max-positions-negative", 2, EXPORT + ["-o", "out"], r"'max_position_embeddings' must be a positive integer, got -5",
         setup=edit_json(CONFIG, max_position_embeddings=-5)),
    Case("max-seq-length-zero", 2, EXPORT + ["-o", "out"], r"sentence_bert_config\.json: 'max_seq_length' must be a positive integer, got 0",
         setup=edit_json("model/sentence_bert_config.json", max_seq_length=0)),
    Case("max-seq-length-negative", 2, EXPORT + ["-o", "out"], r"sentence_bert_config\.json: 'max_seq_length' must be a positive integer, got -8",
         setup=edit_json("model/sentence_bert_config.json", max_seq_length=-8)),
    Case("max-seq-length-string", 2, EXPORT + ["-o", "out"], r"sentence_bert_config\.json: 'max_seq_length' must be a positive integer, got 'long'",
         setup=edit_json("model/sentence_bert_config.json", max_seq_length="long")),
    Case("sliding-window-negative", 2, ["export", "{gemma}", "--weights", "f32", "-o", "out"],
         r"config\.json: 'sliding_window' must be a positive integer, got -4", setup=edit_json("gemma/config.json", sliding_window=-4)),
    Case("sliding-window-zero-gguf", 2, ["convert-gguf", "{gemma}", "--outtype", "f16", "--outfile", "g.gguf"],
         r"config\.json: 'sliding_window' must be a positive integer, got 0", setup=edit_json("gemma/config.json", sliding_window=0)),
    Case("hidden-size-string", 2, EXPORT + ["-o", "out"], r"config\.json: 'hidden_size' must be a positive integer, got '128'",
         setup=edit_json(CONFIG, hidden_size="128")),
    Case("layers-fractional", 2, EXPORT + ["-o", "out"], r"config\.json: 'num_hidden_layers' must be a positive integer, got 2\.5",
         setup=edit_json(CONFIG, num_hidden_layers=2.5)),
    Case("heads-bool", 2, EXPORT + ["-o", "out"], r"config\.json: 'num_attention_heads' must be a positive integer, got True",
         setup=edit_json(CONFIG, num_attention_heads=True)),
    Case("intermediate-size-missing", 2, EXPORT + ["-o", "out"], r"config\.json: missing 'intermediate_size'",
         setup=edit_json(CONFIG, intermediate_size=DELETE)),
    Case("head-dim-zero", 2, EXPORT + ["-o", "out"], r"config\.json: 'head_dim' must be a positive integer, got 0",
         setup=edit_json(CONFIG, head_dim=0)),
    Case("layer-types-wrong-length", 2, EXPORT + ["-o", "out"], r"config\.json: layer_types has 1 entries for 2 layers",
         setup=edit_json(CONFIG, layer_types=["full_attention"])),
    Case("model-type-unknown", 2, EXPORT + ["-o", "out"], r"config\.json: unsupported model_type 'llama9'",
         setup=edit_json(CONFIG, model_type="llama9")),
    Case("config-is-list", 2, EXPORT + ["-o", "out"], r"config\.json: expected a JSON object, got list",
         setup=write(CONFIG, "[1, 2, 3]")),
    Case("config-is-directory", 2, EXPORT + ["-o", "out"], r"model/config\.json: .*(directory|folder)",
         setup=replace_with_dir(CONFIG)),
    Case("config-symlink-loop", 2, EXPORT + ["-o", "out"], r"model/config\.json: .*(symbolic links|symlink)",
         setup=symlink_loop(CONFIG)),
    written("config-not-json", EXPORT + ["-o", "out"], CONFIG, "{hidden_size: 128", "not valid JSON"),
    written("config-empty", EXPORT + ["-o", "out"], CONFIG, "", "not valid JSON"),
    written("config-not-utf8", EXPORT + ["-o", "out"], CONFIG, b'{"a": "\xff\xfe"}', "not valid JSON"),
    Case("config-missing", 2, CONVERT + ["--outfile", "m.gguf"], r"model/config\.json: file not found",
         setup=lambda ws: (ws.model / "config.json").unlink()),
    written("tokenizer-config-not-json", EXPORT + ["-o", "out"], "model/tokenizer_config.json", "{'pad_token': '<pad>'}", "not valid JSON"),
    written("tokenizer-config-is-list", EXPORT + ["-o", "out"], "model/tokenizer_config.json", "[]", "expected a JSON object"),
    written("sentence-bert-config-is-list", EXPORT + ["-o", "out"], "model/sentence_bert_config.json", "[1]", "expected a JSON object, got list"),
    written("modules-json-not-objects", EXPORT + ["-o", "out"], "model/modules.json", "[1, 2]", "expected a list of modules"),
    written("st-config-is-list", CONVERT + ["--outfile", "m.gguf"], "model/config_sentence_transformers.json", "[]", "expected a JSON object"),
    written("pooling-config-is-list", EXPORT + ["-o", "out"], "model/1_Pooling/config.json", "[]", "expected a JSON object"),
    written("tokenizer-not-json", EXPORT + ["-o", "out"], "model/tokenizer.json", "{ nope", r"not a valid tokenizer\.json"),
    Case("embedding-beyond-float16", 2, EXPORT + ["-o", "out"], r"embed_tokens\.weight: value 100000 is beyond float16's range",
         setup=edit_tensors(set_value(_embedding, 1e5))),
    Case("embedding-beyond-float16-gguf", 2, CONVERT + ["--outfile", "m.gguf"], r"embed_tokens\.weight.*float16",
         setup=edit_tensors(set_value(_embedding, -7e4))),
    Case("weight-nan", 2, EXPORT + ["-o", "out"], r"up_proj\.weight.*(NaN|finite)", setup=edit_tensors(set_value(_projection, float("nan")))),
    Case("weight-inf", 2, EXPORT + ["-o", "out"], r"embed_tokens\.weight.*(Inf|finite)", setup=edit_tensors(set_value(_embedding, float("inf")))),
    Case("weight-nan-gguf", 2, CONVERT + ["--outfile", "m.gguf"], r"up_proj\.weight.*(NaN|finite)",
         setup=edit_tensors(set_value(_projection, float("nan")))),
]

# the temp output each writer makes first (io.atomic_folder / atomic_file)
HELD = {
    "export": (EXPORT + ["-o", "out"], "bitnet_onnx.export.writer:save_model", ".out.tmp-*"),
    "convert-gguf": (CONVERT + ["--outfile", "m.gguf"], "bitnet_onnx.convert_gguf.writer:tensor_data", ".m.gguf.*.tmp"),
    "embed": (EMBED + ["--output", "v.json"], "bitnet_onnx.commands.embed:_write_json", ".v.json.*.tmp"),
}
SIGNAL_CASES = [
    Case(f"{verb}-{sig.name.lower()}", 3, argv, None, hold=target, wait_for=tmp, signal=sig,
         status=130 if sig == signal.SIGINT else 128 + sig)
    for verb, (argv, target, tmp) in HELD.items()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
]

MB = 1 << 20
HUGE = 1 << 40
# address space for `embed` of a 5 MB line: it runs in 512 MB; tokenizing the text whole peaked at 1.1 GB.
# A fork of the pre-imported server counts the server's mappings too (all the verbs' imports, ~190 MB):
# the 5 MB line passes with a cap down to 258 MB forked (229 MB cold), a refused /dev/zero with what the
# imports take; every case under this cap answers the same either way, so none needs to run cold.
MEMORY_CAP = 768 * MB
RESOURCE_CASES = [
    Case("embed-5mb-line-under-memory-cap", 4, ["embed", "{export}", "--input", "big.txt"], r"big\.txt|memory",
         status=0, memory=MEMORY_CAP, setup=texts_file("big.txt", FIVE_MB_LINE)),
    Case("embed-5mb-stdin-line-under-memory-cap", 4, ["embed", "{export}", "--input", "-"], r"stdin|memory",
         status=0, memory=MEMORY_CAP, stdin=b"the cat sat " * (5 * MB // 12) + b"\n"),
    Case("inspect-gguf-huge-array", 4, ["inspect", "huge.gguf"], r"huge\.gguf: .*(array|count|items|beyond|larger)",
         setup=texts_file("huge.gguf", gguf_file([gguf_array("tokenizer.ggml.scores", GGUF_UINT8, HUGE)]))),
    Case("inspect-gguf-huge-string-array", 4, ["inspect", "huge.gguf"], r"huge\.gguf: .*(array|count|items|beyond|larger)",
         setup=texts_file("huge.gguf", gguf_file([gguf_array("tokenizer.ggml.tokens", GGUF_STRING, HUGE)]))),
    Case("inspect-gguf-huge-string", 4, ["inspect", "huge.gguf"], r"huge\.gguf: not a readable GGUF file \(metadata 'general\.name' declares 1099511627776 items",
         setup=texts_file("huge.gguf", gguf_file([gguf_str("general.name") + struct.pack("<I", GGUF_STRING) + gguf_str("x", HUGE)]))),
    Case("inspect-gguf-huge-kv-count", 4, ["inspect", "huge.gguf"], r"huge\.gguf: .*(key|count|beyond|larger)",
         setup=texts_file("huge.gguf", GGUF_MAGIC + struct.pack("<IQQ", 3, 0, HUGE))),
    Case("inspect-gguf-huge-tensor-count", 4, ["inspect", "huge.gguf"], r"huge\.gguf: .*(tensor|count|beyond|larger)",
         setup=texts_file("huge.gguf", GGUF_MAGIC + struct.pack("<IQQ", 3, HUGE, 0))),
    Case("export-gguf-huge-array", 4, ["export", "huge.gguf", "-o", "out"], r"huge\.gguf: .*(array|count|items|beyond|larger)",
         setup=texts_file("huge.gguf", gguf_file([gguf_array("tokenizer.ggml.scores", GGUF_UINT8, HUGE)]))),
    Case("export-files-follow-umask-022", 4, EXPORT + ["-o", "out"], None, status=0, umask=0o022, creates=("out",),
         check=assert_modes("out", umask=0o022)),
    Case("export-files-follow-umask-027", 4, EXPORT + ["-o", "out"], None, status=0, umask=0o027, creates=("out",),
         check=assert_modes("out", umask=0o027)),
    Case("convert-file-follows-umask-022", 4, CONVERT + ["--outfile", "m.gguf"], None, status=0, umask=0o022, creates=("m.gguf",),
         check=assert_modes("m.gguf", umask=0o022)),
    Case("embed-file-follows-umask-022", 4, EMBED + ["--output", "v.npy"], None, status=0, umask=0o022, creates=("v.npy",),
         check=assert_modes("v.npy", umask=0o022)),
]

CORRUPT_CASES = [
    # disk full: a small RLIMIT_FSIZE makes every write past it fail with EFBIG
    Case("export-disk-full", 5, EXPORT + ["-o", "out"], r"output out: could not write \(File too large: the file size limit \(ulimit -f\) is 65536 bytes\)", fsize=64 << 10),
    # class 9: gguf-py's numpy tofile drops the errno ("16384 requested and 8208 written"): the cause is
    # found again (a real full disk, tmpfs, is in tests/test_disk_full.py)
    Case("convert-disk-full", 9, CONVERT + ["--outfile", "m.gguf"],
         r"--outfile m\.gguf: could not write \(File too large: the file size limit \(ulimit -f\) is 65536 bytes\); nothing written$",
         fsize=64 << 10),
    Case("embed-disk-full", 5, ["embed", "{export}", "--input", "texts.txt", "--output", "v.jsonl"], r"--output v\.jsonl: could not write \(File too large: the file size limit \(ulimit -f\) is 16384 bytes\)",
         fsize=16 << 10, setup=texts_file("texts.txt", b"a cat sat on the mat\n" * 64)),
    Case("external-data-truncated", 5, ["embed", "{external}", "hello"], r"model\.onnx\.data", setup=truncate("external/model.onnx.data", 0.5)),
    Case("external-data-empty", 5, ["embed", "{external}", "hello"], r"model\.onnx\.data", setup=truncate("external/model.onnx.data", 0)),
    Case("external-data-missing", 5, ["embed", "{external}", "hello"], r"model\.onnx\.data",
         setup=lambda ws: (ws.external / "model.onnx.data").unlink()),
    Case("external-data-is-directory", 5, ["embed", "{external}", "hello"], r"model\.onnx\.data",
         setup=replace_with_dir("external/model.onnx.data")),
    Case("safetensors-header-not-json", 5, EXPORT + ["-o", "out"], r"model\.safetensors: not a valid safetensors file",
         setup=safetensors_header(b"{not json at all}")),
    Case("safetensors-header-too-long", 5, EXPORT + ["-o", "out"], r"model\.safetensors: not a valid safetensors file",
         setup=safetensors_header(b"{}", declared=HUGE)),
    Case("safetensors-truncated", 5, EXPORT + ["-o", "out"], r"model\.safetensors: not a valid safetensors file",
         setup=truncate("model/model.safetensors", 0.5)),
    Case("safetensors-empty", 5, CONVERT + ["--outfile", "m.gguf"], r"model\.safetensors: not a valid safetensors file",
         setup=truncate("model/model.safetensors", 0)),
    Case("safetensors-offsets-outside", 5, EXPORT + ["-o", "out"], r"model\.safetensors: not a valid safetensors file",
         setup=safetensors_header(json.dumps({"model.norm.weight": {"dtype": "F32", "shape": [128],
                                                                   "data_offsets": [0, 1 << 30]}}).encode())),
    Case("safetensors-is-directory", 5, EXPORT + ["-o", "out"], r"model/model\.safetensors: is a directory",
         setup=replace_with_dir("model/model.safetensors")),
    Case("safetensors-wrong-shape", 5, EXPORT + ["-o", "out"], r"up_proj\.weight.*shape",
         setup=edit_tensors(lambda t: t.__setitem__(_projection(t), np.ascontiguousarray(t[_projection(t)][:, :64])))),
    Case("manifest-not-json", 5, EMBED, r"export/bitnet_onnx\.json: not valid JSON", setup=write("export/bitnet_onnx.json", "{")),
    Case("manifest-is-list", 5, EMBED, r"export/bitnet_onnx\.json: expected a JSON object", setup=write("export/bitnet_onnx.json", "[]")),
    Case("manifest-missing-fields", 5, EMBED, r"export/bitnet_onnx\.json: missing field\(s\) .*pooling",
         setup=manifest_field_removed("pooling")),
    Case("manifest-max-length-zero", 5, EMBED, r"export/bitnet_onnx\.json: .*max_length",
         setup=edit_json("export/bitnet_onnx.json", max_length=0)),
    Case("manifest-is-directory", 5, EMBED, r"export/bitnet_onnx\.json", setup=replace_with_dir("export/bitnet_onnx.json")),
    Case("model-onnx-corrupt", 5, EMBED, r"export/model\.onnx", setup=write("export/model.onnx", b"\x08\x07garbage" * 100)),
    Case("model-onnx-empty", 5, EMBED, r"export/model\.onnx", setup=truncate("export/model.onnx", 0)),
    Case("model-onnx-truncated", 5, EMBED, r"export/model\.onnx", setup=truncate("export/model.onnx", 0.6)),
    Case("export-tokenizer-not-json", 5, EMBED, r"export/tokenizer\.json", setup=write("export/tokenizer.json", "{")),
    Case("input-not-utf8", 5, ["embed", "{export}", "--input", "t.txt"], r"t\.txt: not UTF-8 text",
         setup=texts_file("t.txt", b"caf\xe9\n")),
    Case("stdin-not-utf8", 5, ["embed", "{export}", "--input", "-"], r"<stdin>: not UTF-8 text", stdin=b"\xff\xfe\n"),
    Case("input-jsonl-bad-line", 5, ["embed", "{export}", "--input", "t.jsonl"], r"t\.jsonl:2: not valid JSON",
         setup=texts_file("t.jsonl", b'{"text": "ok"}\n{"text": \n')),
    Case("input-is-directory", 5, ["embed", "{export}", "--input", "{model}"], r"--input model"),
    Case("gguf-truncated", 5, ["inspect", "{gguf}"], r"gguf: ", setup=truncate("gguf", 0.5)),
    Case("gguf-bad-magic", 5, ["export", "bad.gguf", "-o", "out"], r"bad\.gguf: not a readable GGUF",
         setup=texts_file("bad.gguf", b"GGML" + bytes(64))),
    Case("gguf-i2s-k-not-multiple-of-block", 5, ["inspect", "t.gguf"], r"t\.gguf: .*tensor 'blk\.0\.ffn_up\.weight': I2_S needs K % 128 == 0, got K=100",
         setup=texts_file("t.gguf", gguf_file([], 1, gguf_tensor("blk.0.ffn_up.weight", (100, 4), 36)) + bytes(256))),
    # found by tests/test_fuzz.py: an empty I2_S tensor whose other dimension overflows numpy's shapes
    Case("gguf-tensor-dimension-of-zero", 5, ["inspect", "t.gguf"], r"t\.gguf: .*tensor 'blk\.0\.ffn_up\.weight': shape \[0, 12970366926827028480\] has a dimension of 0",
         setup=texts_file("t.gguf", gguf_file([], 1, gguf_tensor("blk.0.ffn_up.weight", (0xB400000000000000, 0), 36)) + bytes(64))),
    Case("gguf-tensor-data-beyond-end", 5, ["export", "t.gguf", "-o", "out"], r"t\.gguf: .*tensor 'token_embd\.weight': data ends at byte",
         setup=texts_file("t.gguf", gguf_file([], 1, gguf_tensor("token_embd.weight", (32, 512), 1)) + bytes(64))),
    Case("gguf-empty", 5, ["inspect", "e.gguf"], r"e\.gguf: not a readable GGUF", setup=texts_file("e.gguf", b"")),
    # a folder is read as an export: one that is not (a HF model folder) is named by its missing manifest
    Case("inspect-folder-without-manifest", 5, ["inspect", "{model}"], r"model/bitnet_onnx\.json: manifest missing"),
]

DEV_ZERO = "/dev/zero"
FIFO = r"is a FIFO \(named pipe\), not a regular file"
LOOP = r"a symlink loop \(too many levels of symbolic links\)"
BIG_SPARSE = 300 << 20  # above io.MAX_TOKENIZER_JSON_BYTES (256 MiB): refused by its size, never parsed
HANG = 30  # seconds: every case answers in a few; a blocked open() would not answer at all


def fifo_refused(id: str, argv: list[str], rel: str) -> Case:
    """A class-6 case: the workspace entry ``rel`` is a FIFO nobody writes to, and the one line names it as one
    within HANG seconds."""
    return Case(id, 6, argv, rf"{re.escape(rel)}: {FIFO}", setup=fifo(rel), timeout=HANG)


NOT_REGULAR_CASES = [  # each would block in open() or read without end if opened like a file
    Case("embed-input-fifo", 6, ["embed", "{export}", "--input", "t.txt"], r"^bitnet-onnx embed: error: --input t\.txt: is a FIFO \(named pipe\), not a regular file$",
         setup=fifo("t.txt")),
    Case("embed-input-jsonl-fifo", 6, ["embed", "{export}", "--input", "t.jsonl"], r"--input t\.jsonl: is a FIFO", setup=fifo("t.jsonl")),
    Case("embed-input-dev-zero", 6, ["embed", "{export}", "--input", DEV_ZERO], r"--input /dev/zero: is a character device, not a regular file",
         memory=MEMORY_CAP),
    Case("embed-input-link-to-dev-zero", 6, ["embed", "{export}", "--input", "t.txt"], r"--input t\.txt: is a character device",
         memory=MEMORY_CAP, setup=link("t.txt", DEV_ZERO)),
    Case("dataset-input-fifo", 6, DATASET + ["t.jsonl", "parts"], r"t\.jsonl: is a FIFO \(named pipe\), not a regular file",
         setup=fifo("t.jsonl")),
    Case("dataset-input-folder-holds-fifo", 6, DATASET + ["corpus", "parts"], r"corpus/b\.jsonl: is a FIFO",
         setup=both(mkdir("corpus", with_file=False), texts_file("corpus/a.jsonl", b'{"text": "a cat"}\n'), fifo("corpus/b.jsonl"))),
    fifo_refused("export-config-fifo", EXPORT + ["-o", "out"], CONFIG),
    fifo_refused("convert-config-fifo", CONVERT + ["--outfile", "m.gguf"], CONFIG),
    fifo_refused("export-pooling-config-fifo", EXPORT + ["-o", "out"], "model/1_Pooling/config.json"),
    Case("convert-outfile-fifo", 6, CONVERT + ["--outfile", "o.gguf"], r"--outfile o\.gguf exists and is not a GGUF file; not replacing it",
         setup=fifo("o.gguf")),
]

OTHER_USERS_CASES = [  # tests/test_file_modes.py: every writer, real-shape external data, as another user
    Case(f"export-{weights}-files-follow-umask-022", 7, ["export", "{model}", "--weights", weights, "-o", "out"], None, status=0,
         umask=0o022, creates=("out",), check=assert_modes("out", umask=0o022))
    for weights in ("i2s", "f16", "int8", "nbits")
] + [
    Case("export-text-input-files-follow-umask-022", 7, EXPORT + ["--text-input", "-o", "out"], None, status=0, umask=0o022,
         creates=("out",), check=assert_modes("out", umask=0o022)),
    Case("convert-i2s-follows-umask-022", 7, ["convert-gguf", "{model}", "--outtype", "i2_s", "--pre-tokenizer", "qwen2", "--outfile", "m.gguf"],
         None, status=0, umask=0o022, creates=("m.gguf",), check=assert_modes("m.gguf", umask=0o022)),
    Case("embed-npy-follows-umask-027", 7, EMBED + ["--output", "v.npy"], None, status=0, umask=0o027, creates=("v.npy",),
         check=assert_modes("v.npy", umask=0o027)),
    Case("embed-jsonl-follows-umask-022", 7, ["embed", "{export}", "--input", "t.jsonl", "--output", "v.jsonl"], None, status=0, umask=0o022,
         creates=("v.jsonl",), setup=TEXTS_AT_T, check=assert_modes("v.jsonl", umask=0o022)),
]

TRACEBACK_CASES = [
    Case("export-model-folder-symlink-loop", 8, ["export", "loop", "--weights", "f32", "-o", "out"],
         r"^bitnet-onnx export: error: loop: a symlink loop \(too many levels of symbolic links\)$", setup=loop("loop")),
    Case("export-output-symlink-loop", 8, EXPORT + ["-o", "loop", "--overwrite"], r"-o/--output loop: a symlink loop", setup=loop("loop")),
    Case("embed-input-symlink-loop", 8, ["embed", "{export}", "--input", "loop"], r"--input loop: a symlink loop", setup=loop("loop")),
    Case("embed-output-symlink-loop", 8, EMBED + ["--output", "loop.npy"], r"--output loop\.npy: a symlink loop", setup=loop("loop.npy")),
    Case("dataset-output-symlink-loop", 8, DATASET + ["texts.jsonl", "loop"], r"OUTPUT_DIR loop: a symlink loop", setup=both(TEXTS, loop("loop"))),
    Case("export-config-is-dev-zero-under-memory-cap", 8, EXPORT + ["-o", "out"],
         r"model/config\.json: is a character device, not a regular file", memory=MEMORY_CAP,
         setup=link(CONFIG, DEV_ZERO), timeout=HANG),
    Case("convert-config-is-dev-zero-under-memory-cap", 8, CONVERT + ["--outfile", "m.gguf"],
         r"model/config\.json: is a character device, not a regular file", memory=MEMORY_CAP,
         setup=link(CONFIG, DEV_ZERO), timeout=HANG),
    Case("export-config-too-large", 8, EXPORT + ["-o", "out"],
         r"model/config\.json: \d+ bytes, more than the 16777216 this file may have", memory=MEMORY_CAP,
         setup=sparse(CONFIG, (16 << 20) + 1), timeout=HANG),
    Case("export-gguf-symlink-loop", 8, ["export", "loop.gguf", "-o", "out"], rf"loop\.gguf: {LOOP}",
         setup=loop("loop.gguf"), timeout=HANG),
    Case("export-config-symlink-loop-names-it", 8, EXPORT + ["-o", "out"], rf"model/config\.json: {LOOP}",
         setup=lambda ws: (os.unlink(ws.model / "config.json"), loop("model/config.json")(ws)), timeout=HANG),
] + [  # a signal while the verb's modules are imported (seconds for torch/onnx), before any output; cold:
    # a fork of the pre-imported server has imported them all before the run starts
    Case(f"{verb}-{sig.name.lower()}-while-starting", 8, argv, None, hold="bitnet_onnx.cli:build_parser", wait_held=True,
         signal=sig, status=130 if sig == signal.SIGINT else 128 + sig, cold=True)
    for verb, (argv, _, _) in HELD.items()
    for sig in (signal.SIGINT, signal.SIGTERM)
]

GGUF_INSPECT = ["inspect", "{gguf}"]
PADDED = ["embed", "{export}", "a cat", "a cat sat on the mat"]  # two lengths: the batch pads
# Hostile files at every reader of the package (docs/reliability.md: each goes through bitnet_onnx.io)
READER_CASES = [
    # ---- no input can hang (class 6) ----------------------------------------------------------
    fifo_refused("export-tokenizer-fifo", EXPORT + ["-o", "out"], "model/tokenizer.json"),
    fifo_refused("convert-tokenizer-fifo", CONVERT + ["--outfile", "m.gguf"], "model/tokenizer.json"),
    fifo_refused("export-tokenizer-config-fifo", EXPORT + ["-o", "out"], "model/tokenizer_config.json"),
    fifo_refused("export-safetensors-fifo", EXPORT + ["-o", "out"], "model/model.safetensors"),
    fifo_refused("export-modules-json-fifo", EXPORT + ["-o", "out"], "model/modules.json"),
    fifo_refused("export-sentence-bert-config-fifo", EXPORT + ["-o", "out"], "model/sentence_bert_config.json"),
    fifo_refused("inspect-gguf-fifo", GGUF_INSPECT, "gguf"),
    fifo_refused("export-gguf-fifo", ["export", "f.gguf", "-o", "out"], "f.gguf"),
    fifo_refused("embed-manifest-fifo", EMBED, "export/bitnet_onnx.json"),
    fifo_refused("inspect-manifest-fifo", ["inspect", "{export}"], "export/bitnet_onnx.json"),
    fifo_refused("embed-model-onnx-fifo", EMBED, "export/model.onnx"),
    fifo_refused("embed-external-data-fifo", ["embed", "{external}", "hello"], "external/model.onnx.data"),
    fifo_refused("embed-export-tokenizer-fifo", EMBED, "export/tokenizer.json"),
    # ---- one line, not a traceback (class 8) --------------------------------------------------
    Case("export-tokenizer-too-large", 8, EXPORT + ["-o", "out"],
         r"model/tokenizer\.json: \d+ bytes, more than the 268435456 this file may have", memory=MEMORY_CAP,
         setup=sparse("model/tokenizer.json", BIG_SPARSE), timeout=HANG),
    Case("embed-manifest-too-large", 8, EMBED, r"export/bitnet_onnx\.json: \d+ bytes, more than", memory=MEMORY_CAP,
         setup=sparse("export/bitnet_onnx.json", (16 << 20) + 1), timeout=HANG),
    Case("convert-model-folder-symlink-loop", 8, ["convert-gguf", "loop", "--outtype", "f16", "--outfile", "m.gguf"],
         rf"loop: {LOOP}", setup=loop("loop"), timeout=HANG),
    Case("embed-export-folder-symlink-loop", 8, ["embed", "loop", "hello"], rf"loop: {LOOP}", setup=loop("loop"),
         timeout=HANG),
    Case("inspect-gguf-symlink-loop", 8, ["inspect", "loop.gguf"], rf"loop\.gguf: {LOOP}", setup=loop("loop.gguf"),
         timeout=HANG),
    # a manifest value that would fail inside ORT at run time (texts of two lengths: padding) is refused
    # when the export is loaded
    Case("embed-manifest-pad-token-beyond-vocab", 8, PADDED,
         r"export/bitnet_onnx\.json: .*pad_token_id 1000000000000 .*vocab", setup=edit_json("export/bitnet_onnx.json",
                                                                                            pad_token_id=10 ** 12),
         timeout=HANG),
    Case("embed-manifest-pad-token-negative", 8, PADDED, r"export/bitnet_onnx\.json: .*pad_token_id -1",
         setup=edit_json("export/bitnet_onnx.json", pad_token_id=-1), timeout=HANG),
    # ---- messages that name the cause (class 9) -------------------------------------------------
    Case("verify-export-of-another-architecture", 9, ["verify", "{export}", "{gemma}"],
         r"^bitnet-onnx verify: error: gemma: is gemma3, but export holds a qwen3 export$", timeout=300),
    Case("export-gguf-is-dev-zero", 9, ["export", "z.gguf", "-o", "out"], r"z\.gguf: is a character device",
         memory=MEMORY_CAP, setup=link("z.gguf", DEV_ZERO), timeout=HANG),
]

CALIBRATION = texts_file("calib.txt", b"a cat sat on the mat\na dog in the fog\nthe weather today\n")
PRECISION_CASES = [  # output precisions (docs/precision.md): ranges files and the calibrate verb
    Case("embed-ranges-fifo", 6, EMBED + ["--precision", "int8", "--ranges", "r.npy"], r"r\.npy: is a FIFO",
         setup=fifo("r.npy")),
    Case("embed-ranges-not-npy", 5, EMBED + ["--precision", "int8", "--ranges", "r.npy"], r"r\.npy: not a readable \.npy array",
         setup=texts_file("r.npy", b"not numpy")),
    Case("embed-ranges-json-not-calibration", 5, EMBED + ["--precision", "uint8", "--ranges", "r.json"],
         r"r\.json: not a calibration file", setup=texts_file("r.json", b'{"ranges": []}')),
    Case("embed-ranges-json-nan", 5, EMBED + ["--precision", "uint8", "--ranges", "r.json"],
         r"r\.json: ranges\[2\] holds a value that is not finite", setup=texts_file("r.json", json.dumps(
             {"format_version": 1, "ranges": {"2": [[0, float("nan")], [1, 1]]}}).encode())),
    # read before the server listens or says where: one line, and no "on http://..." before it
    Case("serve-ranges-json-not-calibration", 5, ["serve", "{export}", "--port", "0", "--ranges", "r.json"],
         r"^bitnet-onnx serve: error: r\.json: not a calibration file", setup=texts_file("r.json", b'{"ranges": []}')),
    Case("calibrate-output-is-input", 1, ["calibrate", "{export}", "--input", "calib.txt", "--output", "calib.txt"],
         r"--output calib\.txt: a calibration file is \.json", setup=CALIBRATION),
    Case("calibrate-one-text", 2, ["calibrate", "{export}", "--input", "one.txt", "--output", "r.json"],
         r"calibrate needs at least 2 texts", setup=texts_file("one.txt", b"a cat\n")),
    Case("calibrate-output-inside-export", 1, ["calibrate", "{export}", "--input", "calib.txt", "--output", "{export}/r.json"],
         r"--output export/r\.json is inside the input folder export", setup=CALIBRATION),
    Case("export-output-ranges-wrong-width", 2, EXPORT + ["-o", "out", "--output-precision", "int8", "--output-ranges", "r.npy"],
         r"r\.npy has ranges for width 3, not ", setup=lambda ws: np.save(ws.root / "r.npy", np.zeros((2, 3), np.float32))),
]

CASES = (OUTPUT_CASES + CONFIG_CASES + SIGNAL_CASES + RESOURCE_CASES + CORRUPT_CASES + NOT_REGULAR_CASES
         + OTHER_USERS_CASES + TRACEBACK_CASES + READER_CASES + PRECISION_CASES)
