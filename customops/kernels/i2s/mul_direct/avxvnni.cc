// mul_direct-avxvnni: the avxvnni multiply kernel (ymm vpdpbusd over 8-row panels) with the direct path at
// every M (x86_direct.h). Compiled with -mavx2 -mfma -mf16c -mavxvnni (test builds: its EVEX form) only;
// selected at run time by dispatch.cc.
#include "x86_direct.h"

namespace bitnet_onnx::i2s::mul_direct {

const I2SKernel* avxvnni_kernel() { return x86::direct_kernel<simd::Ymm, i2s_panel::x86::VnniOps<simd::Ymm>>("mul_direct-avxvnni"); }

}  // namespace bitnet_onnx::i2s::mul_direct
