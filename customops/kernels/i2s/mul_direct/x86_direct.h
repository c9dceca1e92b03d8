// An x86 multiply kernel's table with the direct path at every M: PanelDot (kernels/i2s_panel/
// x86_dot.h) over the ISA's Ops with kBufferedMinM out of reach. The sums are the multiply kernel's,
// bit for bit, over the same packed W; the quantizer is the driver's (family.h).
#pragma once
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>
#include <limits>

#include "i2s_panel/x86_dot.h"
#include "mul_direct_kernels.h"
#include "simd/x86.h"

namespace bitnet_onnx::i2s::mul_direct::x86 {
namespace {

template <class Ops>
struct DirectAtEveryM : Ops {
  static constexpr int64_t kBufferedMinM = std::numeric_limits<int64_t>::max();
};

// The table of PanelDot<V, DirectAtEveryM<Ops>>, made once (the first call names it).
template <class V, class Ops>
const I2SKernel* direct_kernel(const char* name) {
  static const I2SKernel kernel = i2s_panel::x86::panel_kernel<V, DirectAtEveryM<Ops>>(name, /*quantize=*/nullptr);
  return &kernel;
}

}  // namespace
}  // namespace bitnet_onnx::i2s::mul_direct::x86
