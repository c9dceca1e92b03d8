// THE seam between the I2STernaryMatMul driver (driver.h) and its kernel families: what a family
// provides, and the one thing the driver lends back. A family is one folder under kernels/i2s/
// (mul/: the multiply kernels; lut/: the lookup kernels; mul_direct/: the x86 multiply kernels'
// direct path at every M; mixed/: vpdpbusd rows and lookup rows co-issued) that includes this header,
// isa.h, kernels/'s shared folders (simd/, i2s_panel/, i2s_lut/) and its own files only, never another
// family's; families.h lists the folders (one row each).
//
// The shape is ggml's CPU "extra buffer types" (ggml-cpu/traits.h): each family is a record
// (name, per-ISA kernels, when it runs), the driver keeps one list of them and asks each in turn;
// the first family (mul) serves every ISA and shape and is what runs when no other is cheaper.
//
// Every kernel of every family computes the same exact int32 sums sum_k q[m,k] * T[n,k] from the
// same quantized activations, so the op's output is bit-identical whichever family runs.
// Pure C++, no ORT headers.
//
// Namespaces follow folders: everything of the op under kernels/i2s/ (the driver, this seam, the
// family table) is in bitnet_onnx::i2s, and a family folder kernels/i2s/<family>/ is
// bitnet_onnx::i2s::<family> (opened as one nested `namespace bitnet_onnx::i2s::<family> {`), its entry
// being <family>::family() (families.h). Inside a folder, a file's helpers may sit in a namespace
// named after the file's prefix (mul/x86_*.h: bitnet_onnx::i2s::mul::x86), and each file keeps its
// kernels in an anonymous namespace: every ISA file instantiates its own copies under its flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "isa.h"

namespace bitnet_onnx::i2s {

// Per-token int8 activations: row m of q holds k values, a[m] = 127 / max(absmax, 1e-5)
// (NaN for a row with NaN/Inf input), qsum[m] = sum of the row of q.
struct QuantizedRows {
  const int8_t* q;
  const float* a;
  const int32_t* qsum;
  int64_t m;
  int64_t k;
};

// The dot of a family's scalar reference, written once for every family: each output row j's ternary
// values read back from the family's own layout once (decode_row(j, t): t[0, k) in {-1, 0, 1}), then its
// exact sum with every token of [m0, m1) into out[(i - m0) * ld + (j - n0)].
template <class DecodeRow>
void reference_dot(int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                   int32_t* out, int64_t ld, DecodeRow decode_row) {
  std::vector<int8_t> t(static_cast<size_t>(k));
  for (int64_t j = n0; j < n1; ++j) {
    decode_row(j, t.data());
    for (int64_t i = m0; i < m1; ++i) {
      const int8_t* qi = rows.q + i * k;
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += static_cast<int32_t>(qi[c]) * t[c];
      out[(i - m0) * ld + (j - n0)] = sum;
    }
  }
}

// Fused RMSNorm (norm_w may be null) then per-token absmax int8 quantization of rows [0, m) of
// x [m, k]. Numerics exactly as bitnet_onnx.ternary.quantize_activations.
using QuantizeFn = void (*)(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q,
                            float* a, int32_t* qsum);

// One kernel of a family on one vector class. The driver quantizes each token once, asks the
// kernel for exact int32 sums over tiles of tokens x output rows, then applies the float epilogue
// y = (float(sum) / a[m]) * s_w. A family's scalar kernel is its reference, tested bit for bit
// against the multiply family's scalar kernel and its own SIMD kernels against it.
struct I2SKernel {
  const char* name;  // the multiply family: its ISA's name (isa.h); others: "<family>-<vector class>"

  // Bytes of the kernel's own weight layout for an [n, k] matrix (k % 128 == 0).
  size_t (*packed_bytes)(int64_t n, int64_t k);

  // I2_S bytes [n, k/4] (docs/architecture.md, "I2_S byte layout") -> the kernel's layout, done once per constant W.
  void (*repack)(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed);

  // The activations' quantizer (QuantizeFn): the base (multiply) family's kernels own one per ISA;
  // every other family leaves it null, since the driver quantizes with the ISA's (quantizer
  // below) whichever family runs, so that every family sees the same q.
  QuantizeFn quantize;

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

  // Optional: the name of the weight layout repack writes when kernels of other families read the
  // same bytes (kernels/i2s_panel/layout.h's panels, mul's and mul_direct's): a node packs a constant
  // W once for the candidates of its ISA that name the same layout (kernel_test checks their
  // packed_bytes and repack agree). Null: the kernel's own layout.
  const char* layout = nullptr;
};

// When the driver runs a family other than the first, measured with kernel_bench on one thread
// against the multiply kernel of the same ISA (docs/op.md, "Kernel families"): the family's first
// rule of the node's ISA with n >= min_n decides. Its kernels work in blocks of `block` tokens, so
// m tokens cost ceil(m / block) blocks; a block costs `cost_percent` % of what the multiply kernel
// takes for `block` tokens. The family runs when that is the cheapest: padded(m) * cost_percent <
// 100 * m (and below every other family's). No rule: the family runs only when forced.
struct FamilyRule {
  Isa isa;
  int64_t min_n;
  int64_t block;         // tokens per block of the family's kernel on this ISA
  int64_t cost_percent;  // one block's time over the multiply kernel's for as many tokens
};

// What a family provides: its folder's dispatch.cc defines `const KernelFamily* <name>::family()`.
struct KernelFamily {
  const char* name;  // the BITNET_ONNX_KERNEL value, and its folder under kernels/i2s/
  // Its kernel for each record of the ISA table, isa.h's IsaRow array (an array of other than
  // kIsaCount rows does not compile here): null where the ISA's architecture is not this build's
  // (BITNET_ONNX_X86 / BITNET_ONNX_ARM) or the family has no kernel for it; the scalar row is
  // never null (the family's reference; a node on an ISA without a row runs the multiply family).
  const IsaRow<I2SKernel> (&kernels)[kIsaCount];
  const FamilyRule* rules;  // rule_count rules (null, 0: the base family, or forced only)
  size_t rule_count;
};

// The activations' quantizer of `isa` (the base family's kernel's, families.cc): what the driver
// quantizes with for every family's kernel of that ISA.
QuantizeFn quantizer(Isa isa);

}  // namespace bitnet_onnx::i2s
