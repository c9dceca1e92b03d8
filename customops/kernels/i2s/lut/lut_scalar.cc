// The lookup family's reference: plain C++ over the pattern layout (lut_layout.h), each pattern
// decoded back into its 4 weights. The SIMD lookup kernels are tested against it bit for bit (and
// it against the multiply kernels' scalar reference).
#include "lut_kernels.h"
#include "lut_layout.h"

namespace bitnet_onnx::i2s::lut {
namespace {

constexpr int kBlockGroups = 8;  // any value is a valid layout; the reference uses the AVX-512 one

size_t packed_size(int64_t n, int64_t k) { return packed_bytes(n, k); }

void repack_scalar(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  repack(i2s, n, k, kBlockGroups, packed);
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
         int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  reference_dot(k, rows, m0, m1, n0, n1, out, ld, [&](int64_t j, int8_t* w) {
    for (int64_t c = 0; c < groups_of(k); ++c) {
      int p = pattern_at(packed, n, k, kBlockGroups, j, c);
      for (int t = 0; t < kGroup; ++t, p /= 3) w[c * kGroup + t] = static_cast<int8_t>(p % 3 - 1);
    }
  });
}

const I2SKernel kScalar = {"lut-scalar", packed_size, repack_scalar, /*quantize=*/nullptr, dot, /*tile_m=*/32,
                           /*tile_n=*/256};

}  // namespace

const I2SKernel* scalar_kernel() { return &kScalar; }

}  // namespace bitnet_onnx::i2s::lut
