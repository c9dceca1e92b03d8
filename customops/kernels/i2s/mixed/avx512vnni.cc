// mixed-avx512vnni: the co-issued kernel (mixed_kernels.h) over zmm: 32-token blocks, vpdpbusd zmm on
// kMulRows of every kMulRows + kLutRows output rows and zmm table lookups on the others. Compiled with the
// avx512vnni multiply kernels' flags only; selected at run time by dispatch.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "mixed_tables.h"
#include "simd/x86.h"

// The split (rows per step on vpdpbusd, on lookups), overridable
// only to measure them (kernel_bench, one build per value; BENCHMARKS.md has the runs).
#ifndef BITNET_MIXED_MUL_ROWS
#define BITNET_MIXED_MUL_ROWS 1
#endif
#ifndef BITNET_MIXED_LUT_ROWS
#define BITNET_MIXED_LUT_ROWS 2
#endif

namespace bitnet_onnx::i2s::mixed {
namespace {

constexpr int kMulRows = BITNET_MIXED_MUL_ROWS;
constexpr int kLutRows = BITNET_MIXED_LUT_ROWS;

constexpr I2SKernel kAvx512Vnni = MixedDot<simd::Zmm, kMulRows, kLutRows>::table("mixed-avx512vnni");

}  // namespace

const I2SKernel* avx512vnni_kernel() { return &kAvx512Vnni; }

}  // namespace bitnet_onnx::i2s::mixed
