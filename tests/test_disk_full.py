"""A full disk says so: "No space left on device" and the space there is, whatever library wrote.

gguf-py writes tensors with numpy's tofile, whose short write carries no errno ("16384 requested and
8208 written"); onnx writes model.onnx from C++. The io layer finds the cause again from the
filesystem (bitnet_onnx.io.outputs._write_errors). End to end on a real full disk: a 256 KiB tmpfs, when
this test may mount one (root with CAP_SYS_ADMIN, as in CI); the io-layer cases run everywhere.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bitnet_onnx import io
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import outputs  # its helpers, patched

TMPFS_BYTES = 256 << 10
NO_SPACE = r"could not write \(No space left on device; \d+(\.\d)? (bytes|KiB) free in {folder}\); nothing written$"


def _can_mount_tmpfs() -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"bitnet-onnx-tmpfs-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    finally:
        probe.rmdir()


TMPFS = _can_mount_tmpfs()


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB filesystem at tmp_path/small (unmounted after the test)."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.skipif(not TMPFS, reason="needs permission to mount a tmpfs (root with CAP_SYS_ADMIN, as in CI)")
@pytest.mark.parametrize("verb", ["convert-gguf", "export", "embed"])
def test_cli_on_a_full_disk(verb, small_disk, tiny_model, tiny_export, tmp_path):
    model = tiny_model("qwen3")
    texts = tmp_path / "texts.txt"
    texts.write_text("a cat sat on the mat\n" * 2000, encoding="utf-8")  # ~2.5 MB of .jsonl out
    argv, label = {
        "convert-gguf": (["convert-gguf", str(model), "--outtype", "f32", "--pre-tokenizer", "qwen2",
                          "--outfile", "small/m.gguf"], r"--outfile small/m\.gguf"),
        "export": (["export", str(model), "--weights", "f32", "-o", "small/out"], r"output small/out"),
        "embed": (["embed", str(tiny_export(model, "f32")), "--input", str(texts), "--output", "small/v.jsonl"],
                  r"--output small/v\.jsonl"),
    }[verb]
    run = subprocess.run([sys.executable, "-m", "bitnet_onnx", *argv], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 1 and len(lines) == 1, run.stderr
    assert re.search(label + ": " + NO_SPACE.format(folder="small"), lines[0]), lines[0]
    assert sorted(os.listdir(small_disk)) == [], "the partial output was left behind"


def _fail_writing(exc: OSError):
    def write(_tmp: Path) -> None:
        raise exc
    return write


def _statvfs_with_free(free: int):
    real = os.statvfs

    def statvfs(path):
        st = real(path)
        return os.statvfs_result((st.f_bsize, 1, st.f_blocks, free, free, *st[5:]))
    return statvfs


def test_short_write_on_a_full_disk_says_no_space(tmp_path, monkeypatch):
    """numpy's short write (no errno) with less space left than it could not write: no space."""
    monkeypatch.setattr(os, "statvfs", _statvfs_with_free(4096))
    with pytest.raises(BitnetOnnxError) as e:
        with io.atomic_file(tmp_path / "m.gguf", what="--outfile") as tmp:
            _fail_writing(OSError("16384 requested and 8208 written"))(tmp)
    assert str(e.value) == f"--outfile {tmp_path / 'm.gguf'}: could not write (No space left on device; 4.0 KiB free in " \
                           f"{tmp_path}); nothing written"
    assert os.listdir(tmp_path) == []


def test_short_write_with_space_left_keeps_the_library_words(tmp_path, monkeypatch):
    """Space enough and no file size limit: the cause is unknown, so the library's own words stay."""
    monkeypatch.setattr(os, "statvfs", _statvfs_with_free(1 << 30))
    monkeypatch.setattr(outputs, "_file_size_limit", lambda: None)
    with pytest.raises(BitnetOnnxError, match=r"could not write \(16384 requested and 8208 written\); nothing written$"):
        with io.atomic_folder(tmp_path / "out") as tmp:
            _fail_writing(OSError("16384 requested and 8208 written"))(tmp)


def test_enospc_names_the_free_space_after_cleanup(tmp_path, monkeypatch):
    """The space reported is measured once the partial output is gone: what the user has to work with."""
    seen = []
    real = outputs._free_bytes

    def free(folder):
        seen.append(sorted(os.listdir(folder)))
        return real(folder)

    monkeypatch.setattr(outputs, "_free_bytes", free)
    with pytest.raises(BitnetOnnxError, match=r"\(No space left on device; .* free in "):
        with io.atomic_file(tmp_path / "v.npy", what="--output") as tmp:
            tmp.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    assert seen[0] != [] and seen[-1] == [], seen  # at the failure the temp file was there; then removed
