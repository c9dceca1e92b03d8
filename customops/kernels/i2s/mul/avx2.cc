// AVX2 kernel (no VNNI): the 8-row panel layout, dot() from x86_dot.h's PanelDot, the quantizer
// from x86_common.h. Compiled with -mavx2 -mfma -mf16c only; selected at run time by dispatch.cc.
//
// Products come from vpmaddubsw (u8 codes x s8 activations -> int16 pair sums,
// |pair| <= 2*2*128 = 512) added in int16 with vpaddw; every 32 quads (|sum| <= 16384, far from
// int16 overflow) vpmaddwd against ones widens them into int32. That is one multiply-port op per
// 32 products instead of two for vpmaddubsw + vpmaddwd every step.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "mul_kernels.h"
#include "simd/x86.h"
#include "x86_dot.h"

namespace bitnet_onnx::i2s::mul {
namespace {

using simd::Ymm;

struct Avx2Ops {
  static constexpr bool kInt32Steps = false;
  static constexpr int64_t kChunkQuads = 32;
  static constexpr int kMr = 3;  // 3 tokens x 2 groups: int16 + int32 sums fill the 16 ymm registers
  static constexpr int kNg = 2;
  static constexpr int kDirectMr = 3, kDirectNg = 2, kSingleNg = 2;  // kSingleNg unused: int16 steps
  static constexpr int64_t kKc = 2048;  // 2 groups x 8 rows x 2 KB of unpacked codes = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 8;
  static Ymm::I step(Ymm::I acc, Ymm::I codes, Ymm::I x) { return Ymm::add16(Ymm::maddubs16(codes, x), acc); }
  static Ymm::I widen(Ymm::I acc) { return Ymm::madd16(acc, Ymm::words(1)); }
};

constexpr I2SKernel kAvx2 = x86::panel_kernel<Ymm, Avx2Ops>("avx2");

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace bitnet_onnx::i2s::mul
