// dot() of the i8mm kernel with SMMLA (ARMv8.6 int8 matrix multiply, FEAT_I8MM): each instruction
// multiplies a 2x8 block of activations (2 tokens) by an 8x2 block of ternary values (2 rows) into
// 2x2 int32 sums, 32 MACs against SDOT's 16. The codes of a panel of 8 rows are decoded once per K
// block into L1 as row pairs (neon_panel.h); tiles of 4 tokens x 8 rows run over it, a tile with an
// odd token multiplying that token twice and keeping one copy. Fewer than kBufferedMinM tokens
// take the dotprod path (every i8mm core has dotprod). int32 accumulation: no overflow at any K.
// Built with -march=armv8.2-a+dotprod+i8mm; called only when HWCAP_ASIMDDP and HWCAP2_I8MM are set.
#if defined(__aarch64__)
#include "neon_panel.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "neon_i8mm.cc must be compiled with -march=armv8.2-a+dotprod+i8mm"
#endif

namespace bitnet_onnx::i2s::mul {
namespace {

// Provisional (no aarch64 core measured yet): by llvm-mca's estimates of the loops (BENCHMARKS.md,
// "aarch64 kernel loops"), the panel (its decode amortized over M tokens) overtakes direct SDOT at
// M ~ 5 on Neoverse N2 and V1.
constexpr int64_t kBufferedMinM = 6;

// Two tokens' 8-value halves side by side: the 2x8 left operand of SMMLA.
inline void token_pair(const int8_t* a, const int8_t* b, int8x16_t* first8, int8x16_t* last8) {
  const int64x2_t x = vreinterpretq_s64_s8(vld1q_s8(a)), y = vreinterpretq_s64_s8(vld1q_s8(b));
  *first8 = vreinterpretq_s8_s64(vzip1q_s64(x, y));
  *last8 = vreinterpretq_s8_s64(vzip2q_s64(x, y));
}

struct SmmlaPanel {
  using Layout = RowPairs;
  static constexpr int kRows = 8;
  static constexpr int kTokens = 4;
  static constexpr int kPairs = kRows / 2;

  // TP token pairs; token 2tp+1 is token 2tp again where the tile has an odd count.
  template <int TP>
  static void tile_of(const int8_t* panel, int64_t chunks, const int8_t* q, int64_t ldq, int tokens, int valid,
                      int32_t* out, int64_t ld, bool accumulate) {
    const int8_t* tok[2 * TP];
    for (int t = 0; t < 2 * TP; ++t) tok[t] = q + std::min(t, tokens - 1) * ldq;
    // Two accumulators per 2x2 block (first and last 8 values of each chunk): no SMMLA waits on
    // the one before it within a chunk (its latency, not its throughput, would bound the loop).
    int32x4_t acc[2][TP][kPairs];
    for (int h = 0; h < 2; ++h)
      for (int tp = 0; tp < TP; ++tp)
        for (int p = 0; p < kPairs; ++p) acc[h][tp][p] = vdupq_n_s32(0);
    for (int64_t c = 0; c < chunks; ++c) {
      int8x16_t first8[TP], last8[TP];
      for (int tp = 0; tp < TP; ++tp) token_pair(tok[2 * tp] + 16 * c, tok[2 * tp + 1] + 16 * c, &first8[tp], &last8[tp]);
      const int8_t* w = panel + c * 16 * kRows;
      for (int p = 0; p < kPairs; ++p) {
        const int8x16_t w_first = vld1q_s8(w + 16 * p), w_last = vld1q_s8(w + 8 * kRows + 16 * p);
        for (int tp = 0; tp < TP; ++tp) {
          acc[0][tp][p] = vmmlaq_s32(acc[0][tp][p], first8[tp], w_first);
          acc[1][tp][p] = vmmlaq_s32(acc[1][tp][p], last8[tp], w_last);
        }
      }
    }
    // acc[0][tp][p] + acc[1][tp][p] = [token 2tp . row 2p, token 2tp . row 2p+1, token 2tp+1 . row 2p, token 2tp+1 . row 2p+1]
    for (int tp = 0; tp < TP; ++tp)
      for (int p = 0; p < kPairs; ++p) {
        int32_t sums[4];
        vst1q_s32(sums, vaddq_s32(acc[0][tp][p], acc[1][tp][p]));
        for (int dt = 0; dt < 2 && 2 * tp + dt < tokens; ++dt)
          for (int dr = 0; dr < 2 && 2 * p + dr < valid; ++dr)
            store_sum(out + (2 * tp + dt) * ld + 2 * p + dr, accumulate, sums[2 * dt + dr]);
      }
  }

  static void tile(const int8_t* panel, int64_t chunks, const int8_t* q, int64_t ldq, int tokens, int valid,
                   int32_t* out, int64_t ld, bool accumulate) {
    if (tokens > 2)
      tile_of<2>(panel, chunks, q, ldq, tokens, valid, out, ld, accumulate);
    else
      tile_of<1>(panel, chunks, q, ldq, tokens, valid, out, ld, accumulate);
  }
};

}  // namespace

void neon_i8mm_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0,
                   int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  if (m1 - m0 >= kBufferedMinM)
    panel_dot<SmmlaPanel>(packed, k, rows, m0, m1, n0, n1, out, ld);
  else
    neon_dotprod_dot(packed, n, k, rows, m0, m1, n0, n1, out, ld);
}

}  // namespace bitnet_onnx::i2s::mul
#endif  // __aarch64__
