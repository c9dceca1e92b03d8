// The mixed family's reference: plain C++ over the 16-row panel layout its avx512vnni kernel reads
// (kernels/i2s_panel/layout.h), each code read back as its ternary value. The family's SIMD kernel is
// tested against it bit for bit (and it against the multiply family's scalar reference).
#include "i2s_panel/layout.h"
#include "mixed_kernels.h"

namespace bitnet_onnx::i2s::mixed {
namespace {

constexpr int64_t kRows = 16;  // rows per panel group: the avx512vnni kernel's

size_t packed_bytes(int64_t n, int64_t k) { return i2s_panel::panel_bytes(n, k, kRows); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  i2s_panel::repack_panels<kRows>(i2s, n, k, packed);
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
         int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  reference_dot(k, rows, m0, m1, n0, n1, out, ld,
                [&](int64_t j, int8_t* t) { i2s_panel::panel_row(packed, k, kRows, j, t); });
}

const I2SKernel kScalar = {"mixed-scalar", packed_bytes, repack, /*quantize=*/nullptr, dot, /*tile_m=*/32,
                           /*tile_n=*/64, /*dot_scaled=*/nullptr, /*min_tile_n=*/0, i2s_panel::panel_layout(kRows)};

}  // namespace

const I2SKernel* scalar_kernel() { return &kScalar; }

}  // namespace bitnet_onnx::i2s::mixed
