// Pure I2_S ternary matmul kernels: no ONNX Runtime headers here.
//
// The driver (driver.h) quantizes each token once, asks the selected kernel for exact int32
// sums sum_k q[m,k] * T[n,k] over tiles of tokens x output rows, then applies the float
// epilogue y = (float(sum) / a[m]) * s_w. Every ISA implements the same table; the scalar
// kernel is the reference the others are tested against bit for bit. A kernel family is a set
// of such tables, one per ISA: the multiply kernels here, and later others (driver.h, "kernel
// families") behind the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "isa.h"

namespace bitnet_onnx {

// Per-token int8 activations: row m of q holds k values, a[m] = 127 / max(absmax, 1e-5)
// (NaN for a row with NaN/Inf input), qsum[m] = sum of the row of q.
struct QuantizedRows {
  const int8_t* q;
  const float* a;
  const int32_t* qsum;
  int64_t m;
  int64_t k;
};

struct I2SKernel {
  const char* name;  // its ISA's name in the ISA table (isa.h)

  // Bytes of the kernel's own weight layout for an [n, k] matrix (k % 128 == 0).
  size_t (*packed_bytes)(int64_t n, int64_t k);

  // I2_S bytes [n, k/4] (docs/architecture.md, "I2_S byte layout") -> the kernel's layout, done once per constant W.
  void (*repack)(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed);

  // Optional fused RMSNorm (norm_w may be null) then per-token absmax int8 quantization of
  // rows [0, m) of x [m, k]. Numerics exactly as bitnet_onnx.ternary.quantize_activations.
  void (*quantize)(const float* x, int64_t m, int64_t k, const float* norm_w, float eps,
                   int8_t* q, float* a, int32_t* qsum);

  // out[(i - m0) * ld + (j - n0)] = sum_k q[i, k] * T[j, k] for i in [m0, m1), j in [n0, n1).
  void (*dot)(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
              int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld);

  // Preferred tile (tokens x output rows) for splitting work across threads.
  int64_t tile_m;
  int64_t tile_n;

  // Optional: dot with the op's epilogue fused, y[(i - m0) * ldy + (j - n0)] =
  // (float(sum) / rows.a[i]) * s_w, bit-identical to dot + epilogue. It saves the int32 round
  // trip through memory; null means the op runs dot and the epilogue itself.
  void (*dot_scaled)(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, float s_w,
                     int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* y, int64_t ldy) = nullptr;

  // The finest output tile (a multiple of 32) the op may cut tile_n down to when the grid has too
  // few jobs to share between threads; 0: never (e.g. amx, whose per-tile setup is costly).
  int64_t min_tile_n = 0;
};

// The multiply kernel of `forced`'s ISA (a name of the ISA table, isa.h; null/empty: the best this
// CPU runs). Returns null and sets *error when the name is unknown or the CPU lacks the ISA.
const I2SKernel* select_kernel(const char* forced, std::string* error);

// The multiply kernel of `isa` (dispatch.cc's row for it); null when this build's architecture
// has none (the record's `built` is false).
const I2SKernel* multiply_kernel(Isa isa);

}  // namespace bitnet_onnx

namespace bitnet_onnx {
// Each ISA's table, defined in its own file (scalar.cc, avx2.cc, avxvnni.cc, avx512vnni.cc,
// amx.cc, neon.cc: neon, dotprod, i8mm) and listed in dispatch.cc's row for that ISA.
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
}  // namespace bitnet_onnx
