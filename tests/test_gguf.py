"""GGUF conversion: round trips through gguf.GGUFReader, the I2_S record, tokenizer, CLI and bad inputs."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from bitnet_onnx import cli
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.convert_gguf import tokenizer as gguf_tokenizer
from bitnet_onnx.gguf_file import I2S_TYPE, decode_i2s, encode_i2s, read_i2s, register_i2s
from bitnet_onnx.convert_gguf.inspect import describe, open_gguf
from bitnet_onnx.convert_gguf.writer import convert
from bitnet_onnx.ternary import ternarize
from bitnet_onnx.weights import open_model

F32, F16 = 0, 1  # GGMLQuantizationType ids
UNUSED, CONTROL, BYTE, NORMAL, USER_DEFINED = 5, 3, 6, 1, 4  # gguf.TokenType
# The seed's mapping tables, written out independently of arch.py.
COMMON = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
          "attn_q_norm_in", "attn_k_norm_in", "attn_v_norm_in", "attn_output_norm_in",
          "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_norm_in", "ffn_up_norm_in", "ffn_down_norm_in", "ffn_norm"]
EXTRA = {"qwen3": [], "gemma3": ["post_attention_norm", "post_ffw_norm"]}
LINEAR = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
OWN_NORMS = {"attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm"}


def expected_names(arch: str, n_layers: int) -> set[str]:
    names = {"token_embd.weight", "output_norm.weight"}
    for i in range(n_layers):
        names |= {f"blk.{i}.{n}.weight" for n in COMMON + EXTRA[arch]}
    return names


@pytest.fixture(scope="module")
def models(tiny_model):
    """bfloat16 weights, as real checkpoints store them (read-only: edit a private_copy)."""
    return {arch: tiny_model(arch, dtype="bfloat16", dense=arch == "gemma3") for arch in ARCHITECTURES}


def _field(reader, key):
    return reader.fields[key].contents()


def _source_by_gguf(folder):
    return {gguf_name: (spec, layer) for spec, layer, gguf_name, _ in folder.tensors()}


@pytest.mark.parametrize("outtype", ["f32", "f16", "i2_s"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_round_trip(tmp_path, models, arch, outtype):
    out = convert(models[arch], tmp_path / "m.gguf", outtype, pre_tokenizer="qwen2" if arch == "qwen3" else None,
                  progress=False)
    assert out == tmp_path / "m.gguf" and sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
    reader = open_gguf(out)
    folder = open_model(models[arch])
    cfg = folder.cfg

    # metadata
    a = arch
    expected = {
        "general.architecture": arch, "general.file_type": {"f32": 0, "f16": 1, "i2_s": 40}[outtype],
        f"{a}.context_length": 512, f"{a}.embedding_length": 128, f"{a}.feed_forward_length": 256,
        f"{a}.block_count": cfg.n_layers, f"{a}.vocab_size": 512,
        f"{a}.attention.head_count": cfg.n_heads, f"{a}.attention.head_count_kv": cfg.n_kv_heads,
        f"{a}.attention.key_length": cfg.head_dim, f"{a}.attention.value_length": cfg.head_dim,
        f"{a}.rope.dimension_count": cfg.head_dim, f"{a}.rope.freq_base": 1e6,
        f"{a}.attention.layer_norm_rms_epsilon": pytest.approx(1e-6),
        f"{a}.pooling_type": {"qwen3": 3, "gemma3": 1}[arch],
    }
    if arch == "gemma3":
        expected.update({f"{a}.attention.query_pre_attn_scalar": 96.0,
                         f"{a}.attention.scale": pytest.approx(96 ** -0.5),
                         f"{a}.attention.sliding_window": 8,
                         f"{a}.attention.sliding_window_pattern": [True, True, False],
                         f"{a}.rope.freq_base_swa": 1e4,
                         "tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
                         "tokenizer.ggml.add_space_prefix": False,
                         "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
                         "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.add_bos_token": True,
                         "tokenizer.ggml.add_eos_token": True})
    else:
        eos = json.loads((models[arch] / "config.json").read_text())["eos_token_id"]
        expected.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
                         "tokenizer.ggml.eos_token_id": eos, "tokenizer.ggml.add_eos_token": True,
                         "tokenizer.ggml.padding_token_id": eos})
        assert f"{a}.attention.sliding_window" not in reader.fields
    for key, value in expected.items():
        got = _field(reader, key)
        assert (got.tolist() if isinstance(got, np.ndarray) else got) == value, key
    assert f"{a}.attention.causal" not in reader.fields

    # tensors: names, shapes, types, data
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == expected_names(arch, cfg.n_layers) and "output.weight" not in tensors
    source = _source_by_gguf(folder)
    for name, t in tensors.items():
        short = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
        spec, layer = source[name]
        w = folder.tensor(spec.role, layer)
        assert [int(d) for d in t.shape] == list(reversed(w.shape)), name
        if short in OWN_NORMS or short == "output_norm":
            w = w + np.float32(1.0) if arch == "gemma3" else w
        if outtype == "i2_s" and short in LINEAR:
            assert int(t.tensor_type) == I2S_TYPE
            ref_t, ref_scale = ternarize(w)
            got_t, got_scale = read_i2s(reader, t)
            assert np.array_equal(got_t, ref_t) and got_scale == np.float32(ref_scale), name
            n, k = w.shape
            tail = reader.data[t.data_offset + n * k // 4: t.data_offset + n * k // 4 + 32]
            assert tail[4:].tolist() == [0] * 28 and tail[:4].view("<f4")[0] == np.float32(ref_scale)
        elif outtype == "f32" or w.ndim == 1:  # 1-D tensors stay F32 in every outtype, as llama.cpp's converter
            assert int(t.tensor_type) == F32
            assert np.asarray(t.data).reshape(w.shape).tobytes() == w.astype(np.float32).tobytes(), name
        else:
            assert int(t.tensor_type) == F16
            assert np.array_equal(np.asarray(t.data).reshape(w.shape), w.astype(np.float16)), name
    if arch == "gemma3":  # own norms carry the +1; per-projection norms do not
        stored = np.asarray(tensors["blk.0.attn_norm.weight"].data, dtype=np.float32)
        raw = folder.tensor("attn_norm", 0)
        assert abs(raw.mean()) < 0.1 and abs(stored.mean() - 1) < 0.1
        stored_in = np.asarray(tensors["blk.0.attn_q_norm_in.weight"].data, dtype=np.float32)
        assert np.allclose(stored_in, folder.tensor("attn_q_norm_in", 0), atol=1e-3)


def test_i2s_records_are_laid_out_back_to_back(tmp_path, models):
    reader = open_gguf(convert(models["qwen3"], tmp_path / "m.gguf", "i2_s", pre_tokenizer="qwen2", progress=False))
    offsets = sorted((int(t.data_offset), t) for t in reader.tensors)
    for (start, t), (next_start, _) in zip(offsets, offsets[1:]):
        if int(t.tensor_type) == I2S_TYPE:
            k, n = (int(d) for d in t.shape)
            assert next_start == start + -(-(n * k // 4 + 32) // 32) * 32


def _reads_as_gguf_py(path: Path, stock_class=None) -> None:
    """open_gguf's reader (a plain view of the file map, arrays parsed whole: gguf_file._plain_array_reader)
    gives every field, part, tensor record and byte of data that gguf-py's reader gives (``stock_class``, by
    default gguf.GGUFReader itself)."""
    import gguf.gguf_reader  # the module's own class: the real Gemma3's shared-reader patch replaces gguf.GGUFReader

    ours, stock = open_gguf(path), (stock_class or gguf.gguf_reader.GGUFReader)(path)
    assert type(ours.data) is np.ndarray and np.array_equal(ours.data, stock.data)
    assert list(ours.fields) == list(stock.fields)
    for name, field in stock.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.types, mine.data) == (field.offset, field.types, field.data), name
        assert _parts(mine) == _parts(field), name
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in ours.tensors] == \
           [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in stock.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, stock.tensors))


def _parts(field) -> list[tuple]:
    return [(part.dtype.str, part.shape, part.tobytes()) for part in field.parts]


@pytest.mark.parametrize("outtype", ["f32", "i2_s"])
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_our_reader_reads_what_gguf_pys_reads(tmp_path, models, arch, outtype):
    """Both tokenizer kinds' arrays: Qwen3's tokens and merges (strings), Gemma3's scores and token types."""
    pre_tokenizer = "qwen2" if arch == "qwen3" else None
    _reads_as_gguf_py(convert(models[arch], tmp_path / "m.gguf", outtype, pre_tokenizer=pre_tokenizer, progress=False))


@pytest.mark.real_size
def test_our_reader_reads_the_real_gemma3_270m_as_gguf_py_does():
    """262,144 tokens, scores and types as llama.cpp wrote them, held to gguf-py's element-at-a-time parse (the
    real-Gemma3 tests share our reader with transformers' reference). gguf-py's parse runs over a plain view
    of the map, as ours does: over its np.memmap it takes 8-12 s here, and the tests above hold the view to it."""
    from bitnet_onnx.gguf_file import _plain_view_reader
    from bitnet_onnx.testing.real_tokenizers import gemma3_gguf

    _reads_as_gguf_py(gemma3_gguf(), _plain_view_reader())


def test_hand_written_vector_packs_to_exact_bytes():
    # values 0-31: +1, 32-63: -1, 64-95: 0, 96-127: +1 at even and -1 at odd positions
    w = np.array([1.0] * 32 + [-1.0] * 32 + [0.0] * 32 + [1.0, -1.0] * 16, dtype=np.float32).reshape(1, 128)
    record = encode_i2s(w).view(np.uint8)
    # byte p = code(p) << 6 | code(p+32) << 4 | code(p+64) << 2 | code(p+96), codes -1:00 0:01 +1:10
    assert record[:32].tobytes() == bytes([0b10_00_01_10, 0b10_00_01_00] * 16)
    assert record[32:].tobytes() == struct.pack("<f", 0.75) + bytes(28)  # s_w = mean|w| = 96/128
    t, scale = decode_i2s(record, 1, 128)
    assert scale == 0.75 and np.array_equal(t[0], w[0].astype(np.int8))
    # rows are consecutive K/4-byte runs
    two = encode_i2s(np.concatenate([w, -w])).view(np.uint8)
    assert two.size == 2 * 32 + 32 and two[32:64].tobytes() == bytes([0b00_10_01_00, 0b00_10_01_10] * 16)


def test_register_i2s_is_idempotent_and_readable(tmp_path):
    import gguf

    member = register_i2s()
    assert register_i2s() is member and gguf.GGMLQuantizationType(36) is member and member.name == "I2_S"
    assert gguf.GGML_QUANT_SIZES[member] == (4, 1)
    writer = gguf.GGUFWriter(tmp_path / "x.gguf", "qwen3")
    record = encode_i2s(np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32))
    writer.add_tensor("w", record, raw_shape=(4, 256), raw_dtype=member)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(tmp_path / "x.gguf")
    (t,) = reader.tensors
    assert t.tensor_type is member and [int(d) for d in t.shape] == [256, 4]
    assert np.array_equal(reader.data[t.data_offset: t.data_offset + record.size], record.view(np.uint8))


def test_vocabularies(tmp_path, models):
    from tokenizers import Tokenizer

    for arch in ARCHITECTURES:
        reader = open_gguf(convert(models[arch], tmp_path / f"{arch}.gguf", "f16", pre_tokenizer="qwen2",
                                   progress=False))
        tok = Tokenizer.from_file(str(models[arch] / "tokenizer.json"))
        tokens, types = _field(reader, "tokenizer.ggml.tokens"), _field(reader, "tokenizer.ggml.token_type")
        assert len(tokens) == 512
        n = tok.get_vocab_size()
        assert all(tokens[i] == tok.id_to_token(i) for i in range(n))
        assert tokens[n:] == [f"[PAD{i}]" for i in range(n, 512)] and set(types[n:]) == {UNUSED}
        model = json.loads((models[arch] / "tokenizer.json").read_text())["model"]
        if arch == "qwen3":
            assert types[tok.token_to_id("<|im_end|>")] == CONTROL and types[tok.token_to_id("<think>")] == USER_DEFINED
            assert len(_field(reader, "tokenizer.ggml.merges")) == len(model["merges"])
        else:
            scores = _field(reader, "tokenizer.ggml.scores")
            assert types[tok.token_to_id("<0x41>")] == BYTE and scores[tok.token_to_id("<0x41>")] == 0
            assert types[2] == CONTROL and scores[2] == -1000 and scores[n] == -10000
            first = "".join(model["merges"][0]) if isinstance(model["merges"][0], list) else model["merges"][0].replace(" ", "")
            assert scores[tok.token_to_id(first)] == 0 and types[tok.token_to_id(first)] == NORMAL
            assert min(scores[:n]) == -1000 and "tokenizer.ggml.merges" not in reader.fields


def test_pre_tokenizer_hash(tmp_path, models, monkeypatch, capsys):
    from tokenizers import Tokenizer

    digest = gguf_tokenizer.check_hash(Tokenizer.from_file(str(models["qwen3"] / "tokenizer.json")))
    rc = cli.main(["convert-gguf", str(models["qwen3"]), "--outfile", str(tmp_path / "m.gguf")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and digest in err and "--pre-tokenizer" in err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(gguf_tokenizer.KNOWN_PRE_TOKENIZERS, digest, "qwen2")
    reader = open_gguf(convert(models["qwen3"], tmp_path / "m.gguf", "f16", progress=False))
    assert _field(reader, "tokenizer.ggml.pre") == "qwen2"


def test_bidirectional_and_pooling(tmp_path, tiny_model):
    path = tiny_model("gemma3", dtype="bfloat16", bidirectional=True, pooling="cls", config_style="v4")
    reader = open_gguf(convert(path, tmp_path / "m.gguf", "f16", progress=False))
    assert bool(_field(reader, "gemma3.attention.causal")) is False
    assert _field(reader, "gemma3.pooling_type") == 2
    assert list(_field(reader, "gemma3.attention.sliding_window_pattern")) == [True, True, False]


def test_qwen3_without_pooling_module_warns_and_uses_last(tmp_path, models, private_copy, caplog):
    path = private_copy(models["qwen3"], "m")
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Pooling")]))
    reader = open_gguf(convert(path, tmp_path / "m.gguf", "f16", pre_tokenizer="qwen2", progress=False))
    assert _field(reader, "qwen3.pooling_type") == 3 and "default pooling 'lasttoken'" in caplog.text


def test_cli_entry_points_and_inspect(tmp_path, models, private_copy):
    out = tmp_path / "q.gguf"
    run = subprocess.run([sys.executable, "-m", "bitnet_onnx", "convert-gguf", str(models["qwen3"]), "--outtype", "i2_s",
                          "--outfile", str(out), "--pre-tokenizer", "qwen2"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert out.is_file()
    shown = subprocess.run([sys.executable, "-m", "bitnet_onnx", "inspect", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "general.file_type = 40" in shown.stdout and "blk.1.ffn_down.weight" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["blk.0.attn_q.weight"])
    assert row.split()[1:4] == ["I2_S", "[128,", "256]"] and row.split()[4] == str(256 * 128 // 4 + 32)
    # default output name: MODEL_DIR/<name>-<outtype>.gguf
    gemma3 = private_copy(models["gemma3"], "gemma3")
    assert cli.main(["convert-gguf", str(gemma3), "--outtype", "f32"]) == 0
    default = gemma3 / "gemma3-f32.gguf"
    assert default.is_file()
    assert "F32" in describe(default)


# ---- bad inputs: one line on stderr, exit 1, nothing left behind


def _rewrite(path: Path, edit) -> None:
    tensors = safetensors.numpy.load_file(path / "model.safetensors")
    edit(tensors)
    safetensors.numpy.save_file(tensors, path / "model.safetensors")


def _fails(capsys, model: Path, out_dir: Path, *extra) -> str:
    out_dir.mkdir(exist_ok=True)
    before = sorted(out_dir.iterdir())
    rc = cli.main(["convert-gguf", str(model), "--outtype", "i2_s", "--outfile", str(out_dir / "m.gguf"),
                   "--pre-tokenizer", "qwen2", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and err.startswith("bitnet-onnx convert-gguf: error: "), err
    assert sorted(out_dir.iterdir()) == before  # no output, no temp file
    return err


def test_misshaped_tensor(tmp_path, capsys, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")

    def edit(t):
        t["layers.1.mlp.down_proj.weight"] = np.zeros((128, 128), np.float32)

    _rewrite(model, edit)
    err = _fails(capsys, model, tmp_path / "out")
    assert "model.safetensors: tensor layers.1.mlp.down_proj.weight has shape (128, 128), config.json implies (128, 256)" in err


def test_missing_tensor(tmp_path, capsys, gemma3_bitnet, private_copy):
    model = private_copy(gemma3_bitnet, "model")
    _rewrite(model, lambda t: t.pop("layers.2.post_feedforward_layernorm.weight"))
    err = _fails(capsys, model, tmp_path / "out")
    assert "required tensor layers.2.post_feedforward_layernorm.weight is missing" in err


def test_unknown_model_type(tmp_path, capsys, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    err = _fails(capsys, model, tmp_path / "out")
    assert "unsupported model_type 'llama'; supported: qwen3 (qwen3), gemma3_text (gemma3)" in err
    (model / "config.json").write_text(json.dumps(config))
    assert "does not match" in _fails(capsys, model, tmp_path / "out", "--arch", "gemma3")


def test_non_finite_weights(tmp_path, capsys, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")

    def edit(t):
        t["layers.0.self_attn.v_proj.weight"][0, 0] = np.inf

    _rewrite(model, edit)
    err = _fails(capsys, model, tmp_path / "out")
    assert "model.safetensors: tensor layers.0.self_attn.v_proj.weight has non-finite values" in err


def test_truncated_safetensors_keeps_existing_output(tmp_path, capsys, qwen3_bitnet, private_copy):
    model = private_copy(qwen3_bitnet, "model")
    file = model / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-4096])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "m.gguf").write_bytes(b"previous")
    err = _fails(capsys, model, out_dir)
    assert "model.safetensors: not a valid safetensors file" in err
    assert (out_dir / "m.gguf").read_bytes() == b"previous"


def test_inspect_rejects_non_gguf(tmp_path, capsys):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    assert cli.main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "x.gguf: not a readable GGUF file" in err


def test_extra_tensors_and_non_bitnet_models_warn(tmp_path, qwen3_standard, private_copy, caplog):
    path = private_copy(qwen3_standard, "m")

    def edit(t):
        t["lm_head.weight"] = np.zeros((512, 128), np.float32)
        t["layers.0.extra.weight"] = np.zeros(4, np.float32)

    _rewrite(path, edit)
    reader = open_gguf(convert(path, tmp_path / "m.gguf", "i2_s", pre_tokenizer="qwen2", progress=False))
    names = {t.name for t in reader.tensors}
    assert not any("norm_in" in n for n in names) and "output.weight" not in names
    assert "no BitNet per-projection norms" in caplog.text
    assert "left out: layers.0.extra.weight" in caplog.text and "lm_head" not in caplog.text
