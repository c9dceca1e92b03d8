// AVX-VNNI kernel: VEX vpdpbusd on ymm over the 8-row panel layout, dot() from i2s_panel/x86_dot.h's
// PanelDot with its VnniOps, the quantizer from x86_quantize.h. Compiled with -mavx2 -mfma -mf16c
// -mavxvnni only (test builds: the EVEX encoding instead, simd/x86.h's Ymm::dpbusd); selected at
// run time by dispatch.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "i2s_panel/x86_dot.h"
#include "mul_kernels.h"
#include "simd/x86.h"
#include "x86_quantize.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr I2SKernel kAvxVnni = i2s_panel::x86::panel_kernel<simd::Ymm, i2s_panel::x86::VnniOps<simd::Ymm>>(
    "avxvnni", x86::quantize<simd::Ymm>);

}  // namespace

const I2SKernel* avxvnni_kernel() { return &kAvxVnni; }

}  // namespace bitnet_onnx::i2s::mul
