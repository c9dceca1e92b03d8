"""Reference vectors for customops/tests/kernel_test.cc, computed by bitnet_onnx.ternary.

Usage: python make_kernel_vectors.py OUT_DIR

Writes one ``<case>.i2sv`` file per case and ``index.txt`` (one line per case: file name, the
multiply-adds of one full dot, so a runner can pick the cheap ones for slow emulators, and the CPUs the
case has a reason to run on: ``any``, or ``x86`` for a case made for a path only x86 kernels have).

File layout (little-endian; arrays row-major, in this order):
  magic b"I2SKV001" | int64 m, n, k | float32 eps | uint32 flags (bit 0: norm weight present)
  x f32 [m,k] | norm_w f32 [k] (flag) | i2s u8 [n,k/4]
  q_plain i8 [m,k] | a_plain f32 [m] | qsum_plain i32 [m]             quantize(x)
  q_norm i8 [m,k] | a_norm f32 [m] | qsum_norm i32 [m]   (flag)       quantize(x, norm_w, eps)
  q_dot i8 [m,k] | qsum_dot i32 [m] | sums i32 [m,n]                   dot input and result

q_dot is the driver's own quantized rows (q_norm, or q_plain without a norm weight) unless a case sets it
apart (the int8 extremes, which no quantized x gives): then the file's sums are those of the op's call on x
too, and kernel_test takes the driver's expected y from them (its epilogue of these exact sums) instead of
running the scalar driver, the costliest part of an emulated run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bitnet_onnx.ternary import i2s_integer_sums, pack_i2s, quantize_activations, rms_norm_f32

MAGIC = b"I2SKV001"
# The op passes its float attribute to the kernel, so the reference uses the float32 epsilon too.
EPS = float(np.float32(1e-6))


def _special_rows(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows that stress quantize: non-finite, zero, exact .5 ties, tiny, huge, subnormal."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    rows = []
    r = x[0].copy(); r[k // 3] = np.nan; rows.append(r)
    r = x[1].copy(); r[-1] = np.inf; rows.append(r)
    r = x[2].copy(); r[0] = -np.inf; rows.append(r)
    rows.append(np.zeros(k, np.float32))
    # absmax 127 -> a == 1 exactly, so x*a keeps the .5 ties: half to even, not away from zero.
    ties = np.resize(np.array([2.5, 3.5, -0.5, -1.5, 0.5, 126.5, -126.5, -2.5], np.float32), k)
    ties[0] = 127.0
    rows.append(ties)
    rows.append((x[3] * 1e-7).astype(np.float32))  # below the 1e-5 absmax floor
    rows.append((x[4] * 1e37).astype(np.float32))  # near the top of float32
    rows.append(np.full(k, 1e-40, np.float32))  # subnormal
    r = np.full(k, -3.0, np.float32); r[5] = 3.0; rows.append(r)  # |min| == max
    for i, row in enumerate(rows[: m]):
        x[i] = row
    return x


def _case(path: Path, x: np.ndarray, t: np.ndarray | None, i2s: np.ndarray | None = None,
          norm_w: np.ndarray | None = None, q_dot: np.ndarray | None = None) -> int:
    """Write one case; returns the multiply-adds of one full dot."""
    m, k = x.shape
    if i2s is None:
        i2s = pack_i2s(t)
    n = i2s.shape[0]
    q_plain, a_plain, qsum_plain = quantize_activations(x)
    if norm_w is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            q_norm, a_norm, qsum_norm = quantize_activations(rms_norm_f32(x, norm_w, EPS))
    if q_dot is None:  # the rows the driver quantizes x to (module docstring)
        q_dot = q_norm if norm_w is not None else q_plain
    qsum_dot = q_dot.astype(np.int32).sum(axis=-1, dtype=np.int32)
    sums = i2s_integer_sums(q_dot, i2s).astype(np.int32)
    parts = [MAGIC, np.array([m, n, k], "<i8").tobytes(), np.array([EPS], "<f4").tobytes(),
             np.array([1 if norm_w is not None else 0], "<u4").tobytes(), x.astype("<f4").tobytes()]
    if norm_w is not None:
        parts.append(norm_w.astype("<f4").tobytes())
    parts += [i2s.astype(np.uint8).tobytes(), q_plain.tobytes(), a_plain.astype("<f4").tobytes(),
              qsum_plain.astype("<i4").tobytes()]
    if norm_w is not None:
        parts += [q_norm.tobytes(), a_norm.astype("<f4").tobytes(), qsum_norm.astype("<i4").tobytes()]
    parts += [q_dot.astype(np.int8).tobytes(), qsum_dot.astype("<i4").tobytes(), sums.astype("<i4").tobytes()]
    path.write_bytes(b"".join(parts))
    return m * n * k


def _random(rng: np.random.Generator, m: int, n: int, k: int, special: bool = False):
    x = _special_rows(m, k, rng) if special else (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(np.float32)
    t = rng.integers(-1, 2, size=(n, k)).astype(np.int8)
    norm_w = rng.uniform(-2, 2, size=k).astype(np.float32)
    return x, t, norm_w


def write_all(out: Path) -> list[tuple[str, int, str]]:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)
    index = []

    def add(name, *args, cpus="any", **kw):
        index.append((f"{name}.i2sv", _case(out / f"{name}.i2sv", *args, **kw), cpus))

    # (K, N, M): a subset of K {128,640,1024,2048,3072} x N {1,7,256,1024} x M {1,3,64,513}.
    shapes = [(128, 1, 1), (128, 7, 3), (640, 7, 64), (640, 256, 513), (1024, 256, 64),
              (1024, 1024, 3), (2048, 1024, 1), (2048, 7, 513), (3072, 1024, 64), (3072, 256, 3),
              (3072, 1, 513), (1024, 1024, 513), (3072, 1024, 513)]
    for k, n, m in shapes:
        x, t, w = _random(rng, m, n, k, special=m >= 64)
        add(f"random_k{k}_n{n}_m{m}", x, t, norm_w=w)
    x, t, w = _random(rng, 3, 7, 640)
    add("random_k640_n7_m3_nonorm", x, t)
    # An output over 8 MB: the x86 dot_scaled paths switch to streaming stores there (the NEON
    # kernels have no such switch, and emulating this case's 2.7 G multiply-adds costs a minute).
    x, t, w = _random(rng, 2048, 1280, 1024)
    add("large_output_k1024_n1280_m2048", x, t, norm_w=w, cpus="x86")

    # K beyond the amx kernel's 4096-column K block: two whole blocks and a 128-column one, C carried
    # between them as int32 partial sums; 5 groups of 16 rows (two pairs and a lone group, the last
    # one partial) and 40 tokens (a token pair, a lone tile and an 8-token tail).
    x, t, w = _random(rng, 40, 70, 8320)
    add("kblocks_k8320_n70_m40", x, t, norm_w=w, cpus="x86")

    # Bytes as a run-time W may hold them: every code including the unused 0b11 (reads as 0).
    x, _, w = _random(rng, 64, 7, 1024)
    add("anybytes_k1024_n7_m64", x, None, i2s=rng.integers(0, 256, size=(7, 1024 // 4), dtype=np.uint8), norm_w=w)
    add("allcode3_k128_n3_m3", x[:3, :128].copy(), None, i2s=np.full((3, 32), 0xFF, np.uint8))

    # Overflow: all weights +1 / -1 / 0 / alternating against q at +127 / -128 everywhere.
    for k in (128, 3072):
        t = np.stack([np.ones(k), -np.ones(k), np.zeros(k), np.resize([1, -1], k), np.resize([-1, 1, 0], k)]).astype(np.int8)
        q = np.stack([np.full(k, 127), np.full(k, -128), np.resize([127, -128], k), np.resize([-128, 127], k),
                      np.zeros(k)]).astype(np.int8)
        x = np.where(q == 0, 0.0, q).astype(np.float32)  # quantize checks on the same extremes
        add(f"extreme_k{k}_n5_m5", x, t, norm_w=np.ones(k, np.float32), q_dot=q)

    # The unused code 0b11 (reads as 0) mixed with +1/-1 against the same extreme activations.
    k = 3072
    i2s = np.stack([np.full(k // 4, b, np.uint8) for b in (0xFF, 0xEE, 0x33, 0xBB, 0xAA, 0x00)])
    add(f"code3_extreme_k{k}_n6_m5", x, None, i2s=i2s, q_dot=q)

    # RMSNorm sum of squares: numpy (the reference) sums float64 pairwise. Rows found by search
    # where another order gives a different float32 inv_rms: row 0 for a plain sequential sum,
    # row 1 for 16 interleaved lanes folded 8-4-2-1.
    k = 3072
    x = np.empty((2, k), np.float32)
    for row, (big, small) in enumerate([(1549.5357666015625, 1.2057283129252028e-05),
                                        (1829.697509765625, 1.3947388652013615e-05)]):
        x[row] = np.float32(small)
        x[row, 0] = np.float32(big)
    add(f"rmsnorm_pairwise_k{k}_n7_m2", x, rng.integers(-1, 2, size=(7, k)).astype(np.int8),
        norm_w=np.ones(k, np.float32))

    # The driver's job grid at its edges: M around the 16-token tiles (neon, lut-neon; 33 is three tiles),
    # N = 100 in output tiles of 64 (neon) or of the 32 the driver halves dotprod's and i8mm's down to,
    # the last one partial, so the 2-thread runs split each case into several jobs. Small K and N keep
    # them in the cheap set that every qemu run emulates.
    for m in (15, 16, 17, 33):
        x, t, w = _random(rng, m, 100, 128)
        add(f"tile_edges_k128_n100_m{m}", x, t, norm_w=w)

    (out / "index.txt").write_text("".join(f"{name} {macs} {cpus}\n" for name, macs, cpus in index))
    return index


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_kernel_vectors.py OUT_DIR")
    for name, macs, cpus in write_all(Path(sys.argv[1])):
        print(name, macs, cpus)
