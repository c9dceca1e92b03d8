// AVX2 kernel (no VNNI): the 8-row panel layout, dot() from i2s_panel/x86_dot.h's PanelDot with its
// Avx2Ops (vpmaddubsw + vpaddw, widened every 64 quads), the quantizer from x86_quantize.h. Compiled
// with -mavx2 -mfma -mf16c only; selected at run time by dispatch.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "i2s_panel/x86_dot.h"
#include "mul_kernels.h"
#include "simd/x86.h"
#include "x86_quantize.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr I2SKernel kAvx2 =
    i2s_panel::x86::panel_kernel<simd::Ymm, i2s_panel::x86::Avx2Ops>("avx2", x86::quantize<simd::Ymm>);

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace bitnet_onnx::i2s::mul
