// AVX512-VNNI kernel: zmm vpdpbusd over the 16-row panel layout (one 64-byte load = 16 rows x 16
// columns of 2-bit codes), dot() from i2s_panel/x86_dot.h's PanelDot with its VnniOps, the quantizer
// from x86_quantize.h. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
// only; selected at run time by dispatch.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "i2s_panel/x86_dot.h"
#include "mul_kernels.h"
#include "simd/x86.h"
#include "x86_quantize.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr I2SKernel kAvx512Vnni = i2s_panel::x86::panel_kernel<simd::Zmm, i2s_panel::x86::VnniOps<simd::Zmm>>(
    "avx512vnni", x86::quantize<simd::Zmm>);

}  // namespace

const I2SKernel* avx512vnni_kernel() { return &kAvx512Vnni; }

}  // namespace bitnet_onnx::i2s::mul
