// with_const<kMax>(r, f): calls f(std::integral_constant<int, r>) for a runtime r in [1, kMax], so a
// kernel loop over r rows/groups is instantiated once per r and fully unrolled. Shared by the
// multiply (i2s_panel/x86_dot.h) and lookup (lut/lut_tables.h) kernels.
#pragma once

#include <type_traits>

namespace bitnet_onnx {

template <int kMax, class F>
inline void with_const(int r, F&& f) {
  if constexpr (kMax >= 1) {
    if (r == kMax) return f(std::integral_constant<int, kMax>{});
    with_const<kMax - 1>(r, f);
  }
}

}  // namespace bitnet_onnx
