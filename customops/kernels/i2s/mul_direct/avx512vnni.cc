// mul_direct-avx512vnni: the avx512vnni multiply kernel (zmm vpdpbusd over 16-row panels) with the direct
// path at every M (x86_direct.h). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
// -mfma -mf16c only; selected at run time by dispatch.cc.
#include "x86_direct.h"

namespace bitnet_onnx::i2s::mul_direct {

const I2SKernel* avx512vnni_kernel() { return x86::direct_kernel<simd::Zmm, i2s_panel::x86::VnniOps<simd::Zmm>>("mul_direct-avx512vnni"); }

}  // namespace bitnet_onnx::i2s::mul_direct
