// dot() of the NEON kernel with SDOT (ARMv8.2 dotprod): int32 accumulation, no overflow at any
// K. Built with -march=armv8.2-a+dotprod; neon.cc calls it only when HWCAP_ASIMDDP is set.
#if defined(__aarch64__)
#include "neon_tile.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cc must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace bitnet_onnx {
namespace {

struct SdotBlock {
  static inline int32x4_t add(int32x4_t acc, const int8x16_t w[8], const int8_t* q) {
    for (int v = 0; v < 8; ++v) acc = vdotq_s32(acc, w[v], vld1q_s8(q + 16 * v));
    return acc;
  }
};

}  // namespace

void neon_dotprod_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  tiled_dot<SdotBlock>(packed, k, rows, m0, m1, n0, n1, out, ld);
}

}  // namespace bitnet_onnx
#endif  // __aarch64__
