"""bitnet_onnx.io's input checks, called directly: what every reader of the package relies on.

A FIFO is opened here in-process on purpose: were the open blocking, this test would hang instead of
failing, which is the bug these checks exist for (the corpus runs the same through the CLI, with a
timeout).
"""

from __future__ import annotations

import os

import pytest

from bitnet_onnx import io
from bitnet_onnx.errors import BitnetOnnxError


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "config.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("reader", [io.check_input_file, io.open_input_file, io.read_input_file, io.read_json])
def test_a_fifo_is_refused_by_name_without_blocking(reader, fifo):
    with pytest.raises(BitnetOnnxError, match=rf"^{fifo}: is a FIFO \(named pipe\), not a regular file$"):
        reader(fifo)


@pytest.mark.parametrize("reader", [io.check_input_file, io.read_json])
def test_a_device_is_refused(reader, tmp_path):
    link = tmp_path / "config.json"
    os.symlink("/dev/zero", link)
    with pytest.raises(BitnetOnnxError, match=r"config\.json: is a character device, not a regular file$"):
        reader(link)


def test_what_names_the_argument(tmp_path):
    with pytest.raises(BitnetOnnxError, match=rf"^--input {tmp_path}: is a directory, not a file$"):
        io.read_input_file(tmp_path, "--input")


def test_missing_says_so_with_the_callers_hint(tmp_path):
    with pytest.raises(BitnetOnnxError, match=r"config\.json: file not found \(a model folder needs config\.json\)$"):
        io.read_json(tmp_path / "config.json", missing=" (a model folder needs config.json)")


def test_symlink_loops_are_one_line(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    os.symlink(b.name, a)
    os.symlink(a.name, b)
    loop = r"a symlink loop \(too many levels of symbolic links\)$"
    with pytest.raises(BitnetOnnxError, match=rf"^{a}: {loop}"):
        io.read_json(a)
    with pytest.raises(BitnetOnnxError, match=rf"^-o/--output {a}: {loop}"):
        io.resolve(a, "-o/--output")
    with pytest.raises(BitnetOnnxError, match=rf"^{a}: {loop}"):
        io.check_apart(tmp_path / "out", [a])


def test_json_size_cap_is_checked_before_reading(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(io.MAX_JSON_BYTES + 1)  # sparse: no disk, and never read
    with pytest.raises(BitnetOnnxError, match=rf"config\.json: {io.MAX_JSON_BYTES + 1} bytes, more than the "
                                              rf"{io.MAX_JSON_BYTES} this file may have$"):
        io.read_json(path)
    with pytest.raises(BitnetOnnxError, match=r"config\.json: not valid JSON"):  # a caller's larger cap: read, parsed
        io.read_json(path, limit=io.MAX_JSON_BYTES + 1)


def test_json_errors_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000)
    with pytest.raises(BitnetOnnxError, match=r"config\.json: not valid JSON"):
        io.read_json(path)
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(BitnetOnnxError, match=r"config\.json: not valid JSON"):
        io.read_json(path)
    path.write_text("[1]")
    with pytest.raises(BitnetOnnxError, match=r"config\.json: expected a JSON object, got list$"):
        io.read_json_object(path)


def test_a_regular_file_reads_whole(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 128}')
    assert io.read_json_object(path) == {"hidden_size": 128}
    with io.open_input_file(path) as f:
        assert os.get_blocking(f.fileno())  # the non-blocking open is undone for the reader
        assert f.read() == b'{"hidden_size": 128}'
