// The co-issued kernel family (issue 44): in one loop, each block's output rows are split between
// vpdpbusd zmm (the multiply kernels' step: the vector multiply pipes) and table lookups (the lookup
// kernels' step: a load and a vpaddw), so that a core with ports for both runs them at once
// (benchmarks/register_peaks.c PATH 15, `mix-avx512`, is that ceiling). Exact int32 sums, bit-identical
// to every other family.
//
// ONE weight layout for both halves (mixed_layout.h): the bytes of the avx512vnni multiply kernel's
// 16-row panels, reordered K block by K block. Byte 4 sp + j of a row's 8 bytes of a block holds its
// codes (ternary + 1, never 3) of columns 16 sp + j, + 4, + 8, + 12 in bits 0-1, 2-3, 4-5, 6-7. So a row's
// bytes of a block serve both halves:
//  - multiply rows: a span's dword broadcast, shifted by 2s and masked with 3: the 4 codes of quad s
//    (columns 4s .. 4s + 3), vpdpbusd against the 4 activations of 16 tokens per int32 lane (tokens are
//    the lanes: the sums are [row][token], as the lookups' are);
//  - lookup rows: byte j IS a table index: entry v = sum_s (field s of v - 1) x[4s + j], a table of
//    171 entries (the largest byte is 0b10101010) of which the 81 with no field 3 are built and read.
// A K block is kBlockSpans spans (4 groups, i.e. tables, per span); per (token block of 32 tokens (zmm;
// a last block of <= 16 tokens: ymm), K block) the tables and the multiply rows' activation dwords come
// from the same gathers, once, and are shared by every row of the job. Sums: lookup rows in int16
// (widened to int32 every kBlocksPerWiden blocks: the bound is i2s_lut/token_lanes.h's kMaxInt16Groups),
// multiply rows in int32 (sums of code x activation, started at -qsum so that they end as sums of
// ternary x activation; int32 wraps, and the true sum fits int32, so they are exact). Private to this folder.
#pragma once

#include "family.h"

namespace bitnet_onnx::i2s::mixed {
// Each vector class's table, in its own file (scalar.cc, avx512vnni.cc, avx512vnni_gfni.cc).
const I2SKernel* scalar_kernel();
#if defined(__x86_64__) || defined(_M_X64)
const I2SKernel* avx512vnni_kernel();       // any AVX512-VNNI CPU
const I2SKernel* avx512vnni_gfni_kernel();  // the same kernel where the CPU also has GFNI
#endif
}  // namespace bitnet_onnx::i2s::mixed
