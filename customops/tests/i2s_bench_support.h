// What the ternary kernels' timing programs (kernel_bench; amx_profile and panel_profile, through
// stage_profile.h) share: random weights, 64-byte aligned vectors, and the multiply of one op call on one
// thread over the kernel's tile grid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "family.h"
#include "tool_support.h"

namespace i2s_bench {

// Vectors on 64-byte boundaries, as ONNX Runtime's CPU allocator places tensors: a kernel's aligned paths
// (whole-line vector stores, streaming stores) run as they run in the op.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <class U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};
template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

// One item of --shapes, "KxN", into k and n; false (the item named on stderr) unless both are
// positive and K a multiple of 128 (whole I2_S blocks).
inline bool parse_shape(const std::string& shape, int64_t* k, int64_t* n) {
  const std::vector<std::string> kn = tool_support::split(shape, 'x');
  *k = kn.size() == 2 ? std::atoll(kn[0].c_str()) : 0;
  *n = kn.size() == 2 ? std::atoll(kn[1].c_str()) : 0;
  if (*k > 0 && *k % 128 == 0 && *n > 0) return true;
  std::fprintf(stderr, "bad shape %s (KxN, K a multiple of 128)\n", shape.c_str());
  return false;
}

// Random I2_S codes of an [n x k] weight, four 2-bit codes per byte: 0..2 only (0b11 is never written).
inline std::vector<uint8_t> random_codes(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> codes(static_cast<size_t>(n * k / 4));
  for (auto& b : codes) {
    uint8_t v = 0;
    for (int f = 0; f < 4; ++f) v = static_cast<uint8_t>(v | ((rng() % 3) << (2 * f)));
    b = v;
  }
  return codes;
}

// y [M x N] = the quantized rows times the packed weight, over the kernel's tile_m x tile_n tiles with n
// tiles outer, as the op's dot_job orders them (dot_scaled; a kernel without it sums into scratch).
inline void dot_grid(const bitnet_onnx::i2s::I2SKernel& kern, const uint8_t* packed, int64_t n, int64_t k,
                     const bitnet_onnx::i2s::QuantizedRows& rows, float* y) {
  const int64_t m = rows.m;
  for (int64_t n0 = 0; n0 < n; n0 += kern.tile_n)
    for (int64_t m0 = 0; m0 < m; m0 += kern.tile_m) {
      const int64_t m1 = std::min(m, m0 + kern.tile_m), n1 = std::min(n, n0 + kern.tile_n);
      if (kern.dot_scaled) {
        kern.dot_scaled(packed, n, k, rows, 0.02f, m0, m1, n0, n1, y + m0 * n + n0, n);
      } else {
        std::vector<int32_t> sums(static_cast<size_t>((m1 - m0) * (n1 - n0)));
        kern.dot(packed, n, k, rows, m0, m1, n0, n1, sums.data(), n1 - n0);
      }
    }
}

}  // namespace i2s_bench
