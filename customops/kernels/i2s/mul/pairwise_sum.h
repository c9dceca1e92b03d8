// The float64 sum of squares of a row in exactly numpy's order, shared by every kernel's fused
// RMSNorm so that inv_rms is bit-identical to bitnet_onnx.ternary.rms_norm_f32 (np.mean of
// np.square(x, float64) reduces a contiguous row with numpy's pairwise_sum). A plain running
// sum differs in the last bit for some rows, which can flip a rounding of q.
#pragma once

#include <cstdint>

namespace bitnet_onnx::i2s::mul {

// numpy's combination of a leaf's eight partial sums.
inline double combine8(const double* r) {
  return ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
}

// Pieces of at most 128 values are leaves summed by 8 interleaved partial sums; longer pieces
// split at n/2 rounded down to a multiple of 8. Needs n % 8 == 0 (every K is a multiple of 128).
// Each square is exact in double, so FMA or mul + add give the same sums.
inline double sum_squares_reference(const float* x, int64_t n) {
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = static_cast<double>(x[j]) * static_cast<double>(x[j]);
    for (int64_t i = 8; i < n; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    return combine8(r);
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return sum_squares_reference(x, n2) + sum_squares_reference(x + n2, n - n2);
}

}  // namespace bitnet_onnx::i2s::mul
