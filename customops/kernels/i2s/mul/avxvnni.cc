// AVX-VNNI kernel: VEX vpdpbusd on ymm over the 8-row panel layout, dot() from x86_dot.h's
// PanelDot, the quantizer from x86_common.h. Compiled with -mavx2 -mfma -mf16c -mavxvnni only;
// selected at run time by dispatch.cc. vpdpbusd accumulates in int32: no widening.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "mul_kernels.h"
#include "x86_common.h"
#include "x86_dot.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

struct VnniYmm {
  static constexpr bool kInt32Steps = true;
  static constexpr int64_t kChunkQuads = int64_t{1} << 40;  // int32 accumulators: no chunking
  static constexpr int kMr = 6;  // 6 tokens x 2 groups = 12 ymm accumulators of 16
  static constexpr int kNg = 2;
  static constexpr int kDirectMr = 3, kDirectNg = 2, kSingleNg = 2;
  static constexpr int64_t kKc = 2048;  // 2 groups x 8 rows x 2 KB of unpacked codes = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 8;
  static __m256i step(__m256i acc, __m256i codes, __m256i x) {
#if defined(BITNET_ONNX_AVXVNNI_AS_EVEX)
    return _mm256_dpbusd_epi32(acc, codes, x);  // test builds only (isa.cc, ../CMakeLists.txt)
#else
    return _mm256_dpbusd_avx_epi32(acc, codes, x);
#endif
  }
  static __m256i widen(__m256i acc) { return acc; }
};

using Dot = PanelDot<Ymm, VnniYmm>;

const I2SKernel kAvxVnni = {"avxvnni", Dot::packed_bytes, Dot::repack, quantize<Ymm>, Dot::dot,
                            /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled, /*min_tile_n=*/64};

}  // namespace

const I2SKernel* avxvnni_kernel() { return &kAvxVnni; }

}  // namespace bitnet_onnx
