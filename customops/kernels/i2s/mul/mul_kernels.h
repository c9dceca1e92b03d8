// The multiply family's kernels (kernels/i2s/mul/): one I2SKernel table per ISA, each in its own
// file with its own flags, listed in dispatch.cc's row for that ISA. Every ISA implements the same
// table (family.h); the scalar kernel is the reference the others are tested against bit for bit,
// and its quantize() is the definition every SIMD quantizer reproduces (and every family uses,
// through i2s::quantizer). Private to this folder.
#pragma once

#include "family.h"

namespace bitnet_onnx::i2s::mul {
// Each ISA's table, defined in its own file (scalar.cc, avx2.cc, avxvnni.cc, avx512vnni.cc,
// amx.cc, neon.cc: neon, dotprod, i8mm).
const I2SKernel* scalar_kernel();
#if defined(__x86_64__) || defined(_M_X64)
const I2SKernel* amx_kernel();
const I2SKernel* avx2_kernel();
const I2SKernel* avxvnni_kernel();
const I2SKernel* avx512vnni_kernel();
#endif
#if defined(__aarch64__)
const I2SKernel* neon_kernel();          // plain NEON
const I2SKernel* neon_dotprod_kernel();  // SDOT
const I2SKernel* neon_i8mm_kernel();     // SMMLA
#endif
}  // namespace bitnet_onnx::i2s::mul
