// mul_direct-avx2: the avx2 multiply kernel (vpmaddubsw + vpaddw ymm over 8-row panels) with the direct
// path at every M (x86_direct.h). Compiled with -mavx2 -mfma -mf16c only; selected at run time by
// dispatch.cc.
#include "x86_direct.h"

namespace bitnet_onnx::i2s::mul_direct {

const I2SKernel* avx2_kernel() { return x86::direct_kernel<simd::Ymm, i2s_panel::x86::Avx2Ops>("mul_direct-avx2"); }

}  // namespace bitnet_onnx::i2s::mul_direct
