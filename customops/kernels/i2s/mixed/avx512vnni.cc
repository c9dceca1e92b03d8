// mixed-avx512vnni on a CPU without GFNI (avx512vnni_kernel.h): the multiply rows' codes cut out by a
// shift and a mask.
#include "avx512vnni_kernel.h"

namespace bitnet_onnx::i2s::mixed {

const I2SKernel* avx512vnni_kernel() { return &kAvx512Vnni<false>; }

}  // namespace bitnet_onnx::i2s::mixed
