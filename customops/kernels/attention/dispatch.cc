// select_tile_ops: each record of the ISA table (isa.h) mapped onto an attention path; the bf16 path of
// each record (bf16_tile_ops) and what precision = "auto" runs (auto_precision).
#include <cstring>
#include <initializer_list>
#include <string>

#include "attention.h"
#include "cpu_features.h"
#include "isa.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// AVX-512 F is all the avx512 path needs and AVX2 + FMA the avx2 one; a forced name is accepted
// where the ISA table says the CPU runs it, so each path's needs are covered. The aarch64 ISAs
// (i8mm, dotprod, neon) have no attention path of their own: scalar. Null where the record is not built
// (the other architecture's), as the library's dispatch description states it.
const IsaRow<TileOps> kPaths[] = {
    /*kIsaAmx=*/BITNET_ONNX_X86(avx512_tile_ops),
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512_tile_ops),
    /*kIsaAvxVnni=*/BITNET_ONNX_X86(avx2_tile_ops),
    /*kIsaAvx2=*/BITNET_ONNX_X86(avx2_tile_ops),
    /*kIsaI8mm=*/BITNET_ONNX_ARM(scalar_tile_ops),
    /*kIsaDotprod=*/BITNET_ONNX_ARM(scalar_tile_ops),
    /*kIsaNeon=*/BITNET_ONNX_ARM(scalar_tile_ops),
    /*kIsaScalar=*/scalar_tile_ops,
};

}  // namespace

const TileOps* tile_ops(Isa isa) { return isa_row(kPaths, isa); }

const TileOps* select_tile_ops(const char* forced, std::string* error) {
  return select_isa_row(kPaths, forced, error);
}

// vdpbf16ps is an AVX-512 instruction: the records whose attention path is avx512 get it where the
// CPU has AVX512-BF16 (Intel Cooper Lake and Sapphire Rapids on, AMD Zen 4 on); the amx record gets
// AMX-BF16 tiles where the CPU has them (Sapphire Rapids on), so BITNET_ONNX_ISA=avx512vnni forces
// the vdpbf16ps path there.
const Bf16TileOps* bf16_tile_ops(Isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
  if (isa == kIsaAmx && cpu_features().amxbf16) return amxbf16_tile_ops();
  if ((isa == kIsaAmx || isa == kIsaAvx512Vnni) && cpu_features().avx512bf16) return avx512bf16_tile_ops();
#else
  (void)isa;
#endif
  return nullptr;
}

namespace {

// precision = "auto" runs bf16 only on a bf16 path measured faster than the f32 tiles on the CPU class at
// hand: AMX-BF16, 2.2-3.3x f32 at S = 2048 (BENCHMARKS.md, "EncoderAttention precision"); AVX512-BF16 on
// AMD Zen 4 (family 0x19), 1.5-1.9x f32 at S = 512-8192 (BENCHMARKS.md, "bf16 on AMD Zen 4"). AVX512-BF16
// was 0.68-0.73x f32 on Sapphire Rapids and is not measured on Zen 5; the f32 tiles on bf16-rounded
// operands cost what f32 does: all of these stay f32.
bool bf16_faster_than_f32(const Bf16TileOps* ops) {
#if defined(__x86_64__) || defined(_M_X64)
  if (ops == nullptr) return false;
  const CpuFeatures& cpu = cpu_features();
  return ops == amxbf16_tile_ops() || (ops == avx512bf16_tile_ops() && cpu.amd && cpu.x86_family == 0x19);
#else
  (void)ops;
  return false;
#endif
}

}  // namespace

bool auto_precision(const char* forced_isa, const char* forced_precision, Precision* precision, std::string* error) {
  if (select_tile_ops(forced_isa, error) == nullptr) return false;  // the ISA the op would refuse
  if (forced_precision != nullptr && forced_precision[0] != '\0') {
    for (Precision p : {Precision::kF32, Precision::kBf16}) {
      if (std::strcmp(forced_precision, precision_name(p)) != 0) continue;
      *precision = p;
      return true;
    }
    if (error)
      *error = std::string(kPrecisionEnv) + "=" + forced_precision + ": unknown attention precision; expected f32 or bf16";
    return false;
  }
  *precision = auto_precision_of(select_isa(forced_isa, nullptr)->isa);  // select_tile_ops accepted it
  return true;
}

Precision auto_precision_of(Isa isa) {
  return bf16_faster_than_f32(bf16_tile_ops(isa)) ? Precision::kBf16 : Precision::kF32;
}

const char* precision_name(Precision precision) { return precision == Precision::kBf16 ? "bf16" : "f32"; }

}  // namespace attention
}  // namespace bitnet_onnx
