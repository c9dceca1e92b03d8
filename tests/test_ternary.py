"""Ternary core: absmean ternarization, the I2_S packer (docs/architecture.md, "I2_S byte layout") and its inverse."""

import numpy as np
import pytest

from bitnet_onnx.ternary import pack_i2s, ternarize, unpack_i2s


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(1)
    for n, k in [(1, 128), (7, 640), (3, 3072)]:
        t = rng.integers(-1, 2, size=(n, k)).astype(np.int8)
        packed = pack_i2s(t)
        assert packed.dtype == np.uint8 and packed.shape == (n, k // 4)
        np.testing.assert_array_equal(unpack_i2s(packed), t)
        np.testing.assert_array_equal(unpack_i2s(packed, k), t)


def test_one_block_packs_to_the_design_bytes():
    # docs/architecture.md: codes -1 -> 00, 0 -> 01, +1 -> 10; byte p holds values p, p+32, p+64, p+96
    # in bits 7-6, 5-4, 3-2, 1-0.
    block = np.zeros(128, dtype=np.int8)
    block[0:32] = -1  # bits 7-6: 00
    block[32:64:2] = 1  # bits 5-4: 10 for even p, 01 (zero) for odd p
    # bits 3-2: values 64..95 stay 0 -> 01
    block[96:128] = -1  # bits 1-0: 00 ...
    block[96:128:4] = 1  # ... except 10 where p % 4 == 0
    expected = bytes([0x26, 0x14, 0x24, 0x14] * 8)  # 00 10 01 10, 00 01 01 00, 00 10 01 00, 00 01 01 00
    assert pack_i2s(block[None, :]).tobytes() == expected


def test_single_values_land_in_the_right_bits():
    t = np.zeros((1, 256), dtype=np.int8)
    t[0, 0] = 1  # block 0, byte 0, bits 7-6 -> 10
    t[0, 127] = -1  # block 0, byte 31, bits 1-0 -> 00
    t[0, 128 + 33] = 1  # block 1, byte 1, bits 5-4 -> 10
    packed = pack_i2s(t)[0]
    expected = np.full(64, 0x55, dtype=np.uint8)  # all zeros: 01 01 01 01
    expected[0], expected[31], expected[32 + 1] = 0x95, 0x54, 0x65
    np.testing.assert_array_equal(packed, expected)


def test_code_11_reads_as_zero():
    packed = np.full((1, 32), 0xFF, dtype=np.uint8)
    np.testing.assert_array_equal(unpack_i2s(packed), np.zeros((1, 128), dtype=np.int8))
    packed[0, 0] = 0b11100011  # values 0 (code 11), 32 (+1), 64 (-1), 96 (code 11)
    t = unpack_i2s(packed)[0]
    assert (t[0], t[32], t[64], t[96]) == (0, 1, -1, 0)


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of 128"):
        pack_i2s(np.zeros((2, 100), dtype=np.int8))
    with pytest.raises(ValueError, match=r"-1, 0, \+1"):
        pack_i2s(np.full((1, 128), 2, dtype=np.int8))
    with pytest.raises(ValueError, match="2-D"):
        pack_i2s(np.zeros(128, dtype=np.int8))
    with pytest.raises(ValueError, match="32-byte blocks"):
        unpack_i2s(np.zeros((1, 20), dtype=np.uint8))


def test_ternarize_absmean():
    w = np.array([[0.5, -0.5, 0.1, 0.0], [1.0, -1.5, 0.25, -0.05]], dtype=np.float32)
    t, s_w = ternarize(w)
    assert s_w == pytest.approx(float(np.mean(np.abs(w))), rel=1e-6)  # 0.4875
    # w / s_w = [1.03, -1.03, 0.21, 0], [2.05, -3.08, 0.51, -0.10] -> round, clamp to [-1, 1]
    np.testing.assert_array_equal(t, [[1, -1, 0, 0], [1, -1, 1, 0]])
    assert t.dtype == np.int8


def test_ternarize_rounds_half_to_even_and_floors_the_scale():
    w = np.array([[0.5, -0.5, 1.5, -1.5]], dtype=np.float32)  # s_w = 1.0: exact ties
    t, s_w = ternarize(w)
    assert s_w == 1.0
    np.testing.assert_array_equal(t, [[0, 0, 1, -1]])  # 0.5 -> 0, 1.5 -> 2 -> clamped 1
    t0, s0 = ternarize(np.zeros((2, 128), dtype=np.float32))
    assert s0 == pytest.approx(1e-5) and not t0.any()
    with pytest.raises(ValueError, match="non-finite"):
        ternarize(np.array([[1.0, np.nan]], dtype=np.float32))
