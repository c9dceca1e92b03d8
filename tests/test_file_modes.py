"""Every file of every writer gets the umask's mode, so another account (a server's) can load it.

Each writer of the command line (every export weight variant, the real-shape export whose weights go
to model.onnx.data, the same with the HF layout, which moves that file into onnx/, the strings-in text
graph, every GGUF outtype, every embed output format, the dataset parts) runs under umask 022 as the test's user and, when the test runs as root, as the
unprivileged ``nobody`` too. Every file must be 0644 and every folder 0755, and (as root) another
unprivileged account must be able to read every byte of it: the deployment this protects, an export
made by the deploy user and served by a service account.

The inputs live in a world-readable folder of their own (pytest's tmp folders are private to root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

UMASK = 0o022
FILE_MODE, FOLDER_MODE = 0o666 & ~UMASK, 0o777 & ~UMASK
AS_ROOT = os.geteuid() == 0
USERS = ["self"] + (["nobody"] if AS_ROOT else [])
READER_UID = 54321  # an account with no file of its own: it reads through the "other" bits only
# above export.writer.EXTERNAL_DATA_THRESHOLD (64 MiB): the export stores the embedding as float16,
# 280k x 128 x 2 bytes = 72 MB
BIG_VOCAB = 280_000
CLI_TIMEOUT = 600


@dataclass(frozen=True)
class Writer:
    id: str
    argv: tuple[str, ...]  # {model}, {big}, {export}, {texts} are inputs, {out} the output
    out: str  # the output's name in the workspace
    expect: tuple[str, ...] = ()  # files the output must hold (the writer took the path under test)


WRITERS = [
    *(Writer(f"export-{w}", ("export", "{model}", "--weights", w, "-o", "{out}"), "out", ("model.onnx",))
      for w in ("i2s", "f32", "f16", "int8", "nbits")),
    Writer("export-f32-external-data", ("export", "{big}", "--weights", "f32", "-o", "{out}"), "out",
           ("model.onnx", "model.onnx.data")),
    Writer("export-f32-external-data-hf-layout", ("export", "{big}", "--weights", "f32", "--layout", "hf", "-o", "{out}"),
           "out", ("model.onnx", "onnx/model.onnx", "onnx/model.onnx_data")),  # the data file moved into onnx/
    Writer("export-text-input", ("export", "{model}", "--weights", "f32", "--text-input", "-o", "{out}"), "out",
           ("model.onnx", "model_text.onnx")),
    *(Writer(f"convert-gguf-{t}", ("convert-gguf", "{model}", "--outtype", t, "--pre-tokenizer", "qwen2",
                                   "--outfile", "{out}"), "m.gguf")
      for t in ("f32", "f16", "i2_s")),
    *(Writer(f"embed-{suffix}", ("embed", "{export}", "--input", "{texts}", "--output", "{out}"), f"v.{suffix}")
      for suffix in ("npy", "jsonl", "json")),
    Writer("embed-dataset", ("embed-dataset", "{export}", "{texts}", "{out}"), "parts", ("_SUCCESS", "_plan.json")),
]


@pytest.fixture(scope="module")
def shared_inputs(tiny_model, tiny_export):
    """Placeholder -> input path, in a folder every account can read."""
    from bitnet_onnx.testing import make_model

    root = Path(tempfile.mkdtemp(prefix="bitnet-onnx-modes-"))
    try:
        model = Path(shutil.copytree(tiny_model("qwen3"), root / "model"))
        export = Path(shutil.copytree(tiny_export(tiny_model("qwen3"), "f32"), root / "export"))
        big = make_model(root / "big", "qwen3", shape={"vocab_size": BIG_VOCAB})  # bfloat16: 72 MB on disk
        texts = root / "texts.jsonl"
        texts.write_text('{"text": "a cat sat on the mat"}\n{"text": "a dog in the fog"}\n', encoding="utf-8")
        _open_to_all(root)
        yield {"model": model, "big": big, "export": export, "texts": texts}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _open_to_all(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def _as(uid: int, gid: int) -> list[str]:
    """The command prefix that runs a program as ``uid``: setpriv execs it while it may still reach
    the interpreter (which may live in root's home, as pyenv's does); the program itself then runs
    with no privilege at all."""
    if uid == os.geteuid():
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root, this test needs setpriv (util-linux) to run writers as another user"
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def _with_umask(umask: int):
    return lambda: os.umask(umask)  # inherited through setpriv's exec


def _account(user: str) -> tuple[int, int]:
    if user == "self":
        return os.geteuid(), os.getegid()
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _modes_wrong(out: Path) -> list[str]:
    """Entries under ``out`` (itself included) whose mode is not the umask's; symlinks are not expected."""
    wrong = []
    for path in [out, *sorted(out.rglob("*"))] if out.is_dir() else [out]:
        st = os.lstat(path)
        want = FOLDER_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) or stat.S_IMODE(st.st_mode) != want:
            wrong.append(f"{path.relative_to(out.parent)}: {stat.filemode(st.st_mode)}, expected {stat.filemode(want)}")
    return wrong


READ_ALL = """
import os, sys
top = sys.argv[1]
files = [top] if os.path.isfile(top) else [os.path.join(d, n) for d, _, names in os.walk(top) for n in names]
assert files, top
for path in files:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
"""


def _reachable_by_others(file: str) -> bool:
    """Whether an account without privilege can exec ``file``: every folder above it searchable by others."""
    path = Path(os.path.realpath(file))
    return all(os.stat(folder).st_mode & stat.S_IXOTH for folder in path.parents) and \
        bool(os.stat(path).st_mode & stat.S_IXOTH)


# Ray starts its workers by exec'ing the interpreter, which another account reaches only when it is
# not in a private folder (pyenv under /root is); the other writers run in the process setpriv made.
OTHERS_CAN_START_PYTHON = _reachable_by_others(sys.executable)


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("writer", WRITERS, ids=[w.id for w in WRITERS])
@pytest.mark.slow
def test_outputs_follow_umask(writer: Writer, user: str, shared_inputs):
    if writer.id == "embed-dataset":
        pytest.importorskip("ray", reason="embed-dataset needs the ray extra (CI installs it with the test extra)")
        if user != "self" and not OTHERS_CAN_START_PYTHON:
            pytest.skip(f"Ray's workers exec {os.path.realpath(sys.executable)}, which {user} cannot reach "
                        "(a private folder above it); the parts' modes are checked as the test's user")
    uid, gid = _account(user)
    work = Path(tempfile.mkdtemp(prefix="bitnet-onnx-modes-run-"))
    try:
        os.chown(work, uid, gid)
        os.chmod(work, 0o755)  # mkdtemp's 0700 would hide the output from the reader below
        out = work / writer.out
        names = {**{k: str(v) for k, v in shared_inputs.items()}, "out": str(out)}
        argv = [a.format(**names) for a in writer.argv]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(work), "RAY_TMPDIR": str(work),
               "TMPDIR": str(work)}
        run = subprocess.run([*_as(uid, gid), sys.executable, "-m", "bitnet_onnx", *argv], cwd=work, env=env,
                             capture_output=True, text=True, timeout=CLI_TIMEOUT, preexec_fn=_with_umask(UMASK))
        assert run.returncode == 0, f"{' '.join(argv)} as {user}: exit {run.returncode}\n{run.stderr[-3000:]}"
        for name in writer.expect:
            assert (out / name).is_file(), f"{writer.id}: {name} missing from {sorted(p.name for p in out.iterdir())}"
        assert not _modes_wrong(out), f"{writer.id} as {user} under umask 022:\n" + "\n".join(_modes_wrong(out))
        if AS_ROOT:  # another unprivileged account reads every byte of it
            reader = subprocess.run([*_as(READER_UID, READER_UID), sys.executable, "-c", READ_ALL, str(out)],
                                    capture_output=True, text=True, env=env, cwd="/")
            assert reader.returncode == 0, f"uid {READER_UID} cannot read {writer.id}'s output:\n{reader.stderr[-2000:]}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


# Run as the unprivileged user: each reader of bitnet_onnx.io on argv[1], one line per reader.
READERS = r"""
import sys
from bitnet_onnx import io
from bitnet_onnx.errors import BitnetOnnxError
for reader in (io.check_input_file, io.open_input_file, io.read_input_file, io.read_json, io.read_json_object):
    try:
        reader(sys.argv[1])
        print(f"{reader.__name__}: read it")
    except BitnetOnnxError as e:
        print(f"{reader.__name__}: {e}")
"""


def test_an_unreadable_input_is_reported_as_permission(tiny_model):
    """A file that exists but this user may not read (0600 of another account; as a non-root test
    user, mode 000 of its own): every io reader and the export verb say permission, naming the
    file, not "file not found"."""
    uid, gid = _account("nobody") if AS_ROOT else (os.geteuid(), os.getegid())
    root = Path(tempfile.mkdtemp(prefix="bitnet-onnx-perm-"))
    try:
        model = Path(shutil.copytree(tiny_model("qwen3"), root / "model"))
        _open_to_all(root)
        locked = model / "model.safetensors"
        os.chmod(locked, 0o600 if AS_ROOT else 0)
        os.chmod(model / "config.json", 0o600 if AS_ROOT else 0)
        res = subprocess.run([*_as(uid, gid), sys.executable, "-c", READERS, str(model / "config.json")], cwd=root,
                             capture_output=True, text=True, timeout=CLI_TIMEOUT)
        assert res.returncode == 0, res.stderr[-2000:]
        lines = res.stdout.splitlines()
        assert len(lines) == 5 and all(f"{model / 'config.json'}: permission denied" in line for line in lines), lines
        os.chmod(model / "config.json", 0o644)
        cli = subprocess.run([*_as(uid, gid), sys.executable, "-m", "bitnet_onnx", "export", str(model),
                              "-o", str(root / "out"), "--weights", "int8"], cwd=root, capture_output=True, text=True,
                             timeout=CLI_TIMEOUT)
        assert cli.returncode != 0 and "Traceback" not in cli.stderr, cli.stderr[-2000:]
        assert cli.stderr.strip().splitlines() == [f"bitnet-onnx export: error: {locked}: permission denied "
                                                   "(this user may not read it)"], cli.stderr
        assert not (root / "out").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
