// AVX512-VNNI kernel: zmm vpdpbusd over the 16-row panel layout (one 64-byte load = 16 rows x 16
// columns of 2-bit codes). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
// -mfma -mf16c only; selected at run time by dispatch.cc. dot() is x86_dot.h's PanelDot, the
// quantizer x86_common.h's; what is this file's own is the step and the tile sizes below.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "mul_kernels.h"
#include "x86_common.h"
#include "x86_dot.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

struct VnniZmm {
  static constexpr bool kInt32Steps = true;
  static constexpr int64_t kChunkQuads = int64_t{1} << 40;  // int32 accumulators: no chunking
  static constexpr int kMr = 12;  // 12 tokens x 2 groups = 24 zmm accumulators of 32
  static constexpr int kNg = 2;
  static constexpr int kDirectMr = 4, kDirectNg = 4;
  static constexpr int kSingleNg = 3;  // one token: 3 x 16 rows, measured ~20% faster than 4 on Zen 4
  static constexpr int64_t kKc = 1024;  // 2 groups x 16 rows x 1 KB of unpacked codes = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 16;
  static __m512i step(__m512i acc, __m512i codes, __m512i x) { return _mm512_dpbusd_epi32(acc, codes, x); }
  static __m512i widen(__m512i acc) { return acc; }
};

using Dot = PanelDot<Zmm, VnniZmm>;

const I2SKernel kAvx512Vnni = {"avx512vnni", Dot::packed_bytes, Dot::repack, quantize<Zmm>, Dot::dot,
                               /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled, /*min_tile_n=*/64};

}  // namespace

const I2SKernel* avx512vnni_kernel() { return &kAvx512Vnni; }

}  // namespace bitnet_onnx
