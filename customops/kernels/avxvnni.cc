// AVX-VNNI kernel (VEX vpdpbusd on ymm). Compiled with -mavx2 -mfma -mf16c -mavxvnni only;
// selected at run time by dispatch.cc.
//
// Weights: the 8-row panel layout of x86_common.h (one 32-byte load = 8 rows x 16 columns of
// 2-bit codes); dot() is x86_common.h's YmmDot: many tokens run a 6-token x 16-row microkernel
// (12 ymm accumulators) over codes unpacked once per 16-row panel and K block into L1; few
// tokens unpack in registers (one token: mask-only, per-field accumulators). vpdpbusd
// accumulates in int32, so no widening is needed.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "i2s_kernel.h"
#include "x86_common.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

struct VnniOps {
  static constexpr bool kInt32Steps = true;  // step accumulates in int32
  static constexpr int kMr = 6;
  static constexpr int64_t kChunkQuads = int64_t{1} << 40;  // int32 accumulators: no chunking
  static __m256i step(__m256i acc, __m256i codes, __m256i x) { return _mm256_dpbusd_avx_epi32(acc, codes, x); }
  static __m256i widen(__m256i acc) { return acc; }
};

using Dot = YmmDot<VnniOps>;

size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, Dot::G); }
void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<Dot::G>(i2s, n, k, packed); }

const I2SKernel kAvxVnni = {"avxvnni", packed_bytes, repack, quantize_ymm, Dot::dot,
                         /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled};

}  // namespace

const I2SKernel* avxvnni_kernel() { return &kAvxVnni; }

}  // namespace bitnet_onnx
