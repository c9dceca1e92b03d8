// The lookup kernel family (Vec-LUT style, issue 21): the same I2SKernel interface as the multiply
// kernels (the seam, family.h), exact int32 sums, so its outputs are bit-identical to theirs.
//
// Why it can beat a multiply kernel: for a block of T tokens (16 int16 lanes per ymm, 32 per zmm)
// and one group of 4 ternary weights (lut_layout.h), the T partial sums of all 81 weight patterns
// are built once per (token block, group); then every output row adds ONE table entry per group,
// one vpaddw from L1 doing 4 x T weight-MACs (128 per zmm instruction, against 64 for vpdpbusd zmm,
// 16 for the AVX2 vpmaddubsw + vpaddw pair).
//
// Loop order of one (token block x row range) job, lut_tables.h:
//   for each K block of kBlockGroups groups (its tables, kBlockGroups x 81 x T x 2 bytes, fit L1):
//     build the tables (gather each token's 4 bytes, 2 + 2 x 4 shifts, then 81 adds + stores)
//     for every row (4 at a time, 4 independent accumulators): acc16 += table[c][pattern] over
//       the block's groups; the int16 sums go back to a per-row buffer, and every kBlocksPerWiden
//       blocks they are widened (even / odd words) into the row's int32 sums;
//   epilogue: the int32 sums [row][token] transposed into out / y (the op's float epilogue).
// Bound that keeps int16 exact: |entry| <= 4 x 128 = 512 (int8 activations in [-128, 127], weights
// in {-1, 0, 1}); an int16 sum is widened after at most kMaxInt16Groups = 63 groups, 63 x 512 =
// 32256 <= 32767. The int32 sums are exact while |sum| <= 128 K < 2^31 (the op's K < 2^24).
#pragma once

#include "family.h"
#include "i2s_lut/token_lanes.h"
#include "isa.h"

namespace bitnet_onnx::i2s::lut {

using i2s_lut::kMaxInt16Groups;  // 63 x 4 x 128 = 32256: the int16 sums cannot overflow (i2s_lut/token_lanes.h)

// Each table of the lookup family (name "lut-<vector class>"), mapped onto the ISA table by
// dispatch.cc: avx512-class ISAs (amx, avx512vnni) run lut-avx512, avxvnni and avx2 run lut-avx2,
// i8mm, dotprod and neon lut-neon, scalar the reference lut-scalar. quantize is the ISA's
// quantizer of the seam (i2s::quantizer: the multiply kernel's of the same vector class), so
// every family sees the same activations.
const I2SKernel* scalar_kernel();
#if defined(__x86_64__) || defined(_M_X64)
const I2SKernel* avx2_kernel();
const I2SKernel* avx512_kernel();
#endif
#if defined(__aarch64__)
const I2SKernel* neon_kernel();
#endif

}  // namespace bitnet_onnx::i2s::lut
