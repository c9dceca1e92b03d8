// mixed-avx512vnni on a CPU with GFNI (avx512vnni_kernel.h): the multiply rows' codes cut out by one
// vgf2p8affineqb each. Compiled with -mgfni on top of the avx512vnni flags: nothing of this file runs on a
// CPU without GFNI (dispatch.cc).
#include "avx512vnni_kernel.h"

#if !defined(__GFNI__)
#error "avx512vnni_gfni.cc is built with -mgfni (customops/kernels/i2s/mixed/CMakeLists.txt)"
#endif

namespace bitnet_onnx::i2s::mixed {

const I2SKernel* avx512vnni_gfni_kernel() { return &kAvx512Vnni<true>; }

}  // namespace bitnet_onnx::i2s::mixed
