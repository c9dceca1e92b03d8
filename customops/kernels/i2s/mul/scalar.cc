// The reference kernel: plain C++, the I2_S bytes used as they are. Every other ISA is tested
// against it bit for bit, and its quantize() is the definition the SIMD versions reproduce.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mul_kernels.h"
#include "pairwise_sum.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr int64_t kBlock = 128;      // values per I2_S block
constexpr int64_t kBlockBytes = 32;  // bytes per I2_S block
constexpr float kActEps = 1e-5f;     // floor of the per-token absmax

size_t packed_bytes(int64_t n, int64_t k) { return static_cast<size_t>(n) * static_cast<size_t>(k / 4); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  std::memcpy(packed, i2s, packed_bytes(n, k));
}

// One row of I2_S bytes -> ternary int8 values; code 0b11 (never written) reads as 0.
void decode_row(const uint8_t* row, int64_t k, int8_t* t) {
  static const int8_t kValue[4] = {-1, 0, 1, 0};
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const uint8_t* src = row + b * kBlockBytes;
    int8_t* dst = t + b * kBlock;
    for (int p = 0; p < kBlockBytes; ++p) {
      const uint8_t byte = src[p];
      dst[p] = kValue[(byte >> 6) & 3];
      dst[p + 32] = kValue[(byte >> 4) & 3];
      dst[p + 64] = kValue[(byte >> 2) & 3];
      dst[p + 96] = kValue[byte & 3];
    }
  }
}

// The value quantization sees at position i of a row (after the optional fused RMSNorm).
inline float normed(const float* x, const float* norm_w, float inv_rms, int64_t i) {
  return norm_w ? (x[i] * inv_rms) * norm_w[i] : x[i];
}

// bitnet_onnx.ternary: rms_norm_f32 (sum of squares in double in numpy's order, the rest in float) followed by
// quantize_activations (absmax int8, round half to even; a non-finite row gives q = 0, a = NaN).
void quantize(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q,
              float* a, int32_t* qsum) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    float inv_rms = 1.0f;
    if (norm_w) {
      const double ss = sum_squares_reference(xr, k);
      inv_rms = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(k) + static_cast<double>(eps)));
    }
    float absmax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < k; ++i) {
      const float v = normed(xr, norm_w, inv_rms, i);
      finite = finite && std::isfinite(v);
      absmax = std::max(absmax, std::fabs(v));
    }
    if (!finite) {
      std::memset(qr, 0, static_cast<size_t>(k));
      a[r] = std::nanf("");
      qsum[r] = 0;
      continue;
    }
    const float scale = 127.0f / std::max(absmax, kActEps);
    int32_t sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::nearbyint(normed(xr, norm_w, inv_rms, i) * scale);
      const int8_t qi = static_cast<int8_t>(std::min(127.0f, std::max(-128.0f, v)));
      qr[i] = qi;
      sum += qi;
    }
    a[r] = scale;
    qsum[r] = sum;
  }
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0,
         int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  reference_dot(k, rows, m0, m1, n0, n1, out, ld, [&](int64_t j, int8_t* t) { decode_row(packed + j * (k / 4), k, t); });
}

const I2SKernel kScalar = {"scalar", packed_bytes, repack, quantize, dot, /*tile_m=*/16, /*tile_n=*/64};

}  // namespace

const I2SKernel* scalar_kernel() { return &kScalar; }

}  // namespace bitnet_onnx::i2s::mul
