// dot() of the NEON kernel with SDOT (ARMv8.2 dotprod): int32 accumulation, no overflow at any
// K. Built with -march=armv8.2-a+dotprod; neon.cc calls it only when HWCAP_ASIMDDP is set.
#if defined(__aarch64__)
#include "neon_tile.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cc must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace bitnet_onnx {
namespace {

struct Sdot {
  static inline void step(int32x4_t& acc, int16x8_t&, int8x16_t w, int8x16_t q) { acc = vdotq_s32(acc, w, q); }
  static inline void flush(int32x4_t&, int16x8_t&) {}
};

}  // namespace

void neon_dotprod_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  tiled_dot<Sdot>(packed, k, rows, m0, m1, n0, n1, out, ld);
}

}  // namespace bitnet_onnx
#endif  // __aarch64__
