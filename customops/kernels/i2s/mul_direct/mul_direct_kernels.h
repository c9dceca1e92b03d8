// The mul_direct family's kernels (kernels/i2s/mul_direct/): the x86 multiply kernels (kernels/i2s_panel/
// x86_dot.h's PanelDot, the panel layout) with the direct path at every M: codes unpacked in registers
// and reused across a microkernel's tokens, never the buffered path's L1 copy of a K block that the
// multiply family takes from Ops::kBufferedMinM tokens on. Which of the two is faster at 16-128 tokens
// depends on the CPU (Zen 4: direct, by 4-20%), so it is a family of its own that the driver measures
// against mul per shape (docs/op.md, "Kernel families"). Private to this folder.
#pragma once

#include "family.h"

namespace bitnet_onnx::i2s::mul_direct {
// Each vector class's table, in its own file (scalar.cc, avx2.cc, avxvnni.cc, avx512vnni.cc).
const I2SKernel* scalar_kernel();
#if defined(__x86_64__) || defined(_M_X64)
const I2SKernel* avx2_kernel();
const I2SKernel* avxvnni_kernel();
const I2SKernel* avx512vnni_kernel();
#endif
}  // namespace bitnet_onnx::i2s::mul_direct
