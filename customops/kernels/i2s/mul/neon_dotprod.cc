// dot() of the dotprod kernel with SDOT (ARMv8.2 dotprod): int32 accumulation, no overflow at any
// K. Few tokens decode the codes in registers (neon_tile.h); from kBufferedMinM tokens on, a panel
// of 4 rows is decoded once per K block into L1 (neon_panel.h) and reused by every 4-token tile.
// Built with -march=armv8.2-a+dotprod; called only when HWCAP_ASIMDDP is set.
#if defined(__aarch64__)
#include "neon_panel.h"
#include "neon_tile.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cc must be compiled with -march=armv8.2-a+dotprod"
#endif

namespace bitnet_onnx::i2s::mul {
namespace {

// Provisional (no aarch64 core measured yet): by llvm-mca's estimates of the loops (BENCHMARKS.md,
// "aarch64 kernel loops"), the panel overtakes the direct loop at M ~ 7 on Neoverse N1, ~ 5 on V1.
constexpr int64_t kBufferedMinM = 8;

struct Sdot {
  static inline void step(int32x4_t& acc, int16x8_t&, int8x16_t w, int8x16_t q) { acc = vdotq_s32(acc, w, q); }
  static inline void flush(int32x4_t&, int16x8_t&) {}
};

// Buffered: up to 4 tokens x 4 rows of SDOT accumulators, the rows' 16 values loaded from the panel.
struct SdotPanel {
  using Layout = Rows;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 4;

  template <int T>
  static void tile_of(const int8_t* panel, int64_t chunks, const int8_t* q, int64_t ldq, int valid, int32_t* out,
                      int64_t ld, bool accumulate) {
    int32x4_t acc[T][kRows];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < kRows; ++r) acc[t][r] = vdupq_n_s32(0);
    for (int64_t c = 0; c < chunks; ++c) {
      int8x16_t w[kRows];
      for (int r = 0; r < kRows; ++r) w[r] = vld1q_s8(panel + (c * kRows + r) * 16);
      for (int t = 0; t < T; ++t) {
        const int8x16_t qv = vld1q_s8(q + t * ldq + 16 * c);
        for (int r = 0; r < kRows; ++r) acc[t][r] = vdotq_s32(acc[t][r], w[r], qv);
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < valid; ++r) store_sum(out + t * ld + r, accumulate, vaddvq_s32(acc[t][r]));
  }

  static void tile(const int8_t* panel, int64_t chunks, const int8_t* q, int64_t ldq, int tokens, int valid,
                   int32_t* out, int64_t ld, bool accumulate) {
    switch (tokens) {
      case 4: tile_of<4>(panel, chunks, q, ldq, valid, out, ld, accumulate); break;
      case 3: tile_of<3>(panel, chunks, q, ldq, valid, out, ld, accumulate); break;
      case 2: tile_of<2>(panel, chunks, q, ldq, valid, out, ld, accumulate); break;
      default: tile_of<1>(panel, chunks, q, ldq, valid, out, ld, accumulate); break;
    }
  }
};

}  // namespace

void neon_dotprod_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  if (m1 - m0 >= kBufferedMinM)
    panel_dot<SdotPanel>(packed, k, rows, m0, m1, n0, n1, out, ld);
  else
    tiled_dot<Sdot>(packed, k, rows, m0, m1, n0, n1, out, ld);
}

}  // namespace bitnet_onnx::i2s::mul
#endif  // __aarch64__
