// The mixed family's reference: plain C++ over the layout its avx512vnni kernel reads (mixed_layout.h),
// each code read back as its ternary value. The family's SIMD kernel is
// tested against it bit for bit (and it against the multiply family's scalar reference).
#include "mixed_kernels.h"
#include "mixed_layout.h"

namespace bitnet_onnx::i2s::mixed {
namespace {

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
         int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  reference_dot(k, rows, m0, m1, n0, n1, out, ld, [&](int64_t j, int8_t* t) {
    for (int64_t c = 0; c < k; ++c) t[c] = static_cast<int8_t>(code_at(packed, n, j, c) - 1);
  });
}

const I2SKernel kScalar = {"mixed-scalar", packed_bytes, repack, /*quantize=*/nullptr, dot, /*tile_m=*/32,
                           /*tile_n=*/64, /*dot_scaled=*/nullptr, /*min_tile_n=*/0};

}  // namespace

const I2SKernel* scalar_kernel() { return &kScalar; }

}  // namespace bitnet_onnx::i2s::mixed
