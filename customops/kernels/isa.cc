#include "isa.h"

#include <cstring>

namespace bitnet_onnx {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
constexpr bool kX86 = true;
#else
constexpr bool kX86 = false;
#endif
#if defined(__aarch64__)
constexpr bool kArm = true;
#else
constexpr bool kArm = false;
#endif

// Builds made with -DBITNET_ONNX_AVXVNNI_AS_EVEX=ON (kernel tests, benchmarks; never the shipped
// library) compile the avxvnni kernel with the EVEX encoding of the same ymm vpdpbusd, so that its
// code runs on CPUs with AVX512-VNNI but no AVX-VNNI (AMD Zen 4/5).
bool avxvnni_runs(const CpuFeatures& f) {
#if defined(BITNET_ONNX_AVXVNNI_AS_EVEX)
  return f.avxvnni || f.avx512vnni;
#else
  return f.avxvnni;
#endif
}

constexpr IsaRecord kIsaTable[] = {
    {kIsaAmx, "amx", kX86, [](const CpuFeatures& f) { return f.amx; },
     "AMX-INT8 + AVX512-VNNI and the OS's tile-data permission (Linux >= 5.16)"},
    {kIsaAvx512Vnni, "avx512vnni", kX86, [](const CpuFeatures& f) { return f.avx512vnni; },
     "AVX512F/BW/VL/DQ/VNNI with OS-enabled zmm state"},
    {kIsaAvxVnni, "avxvnni", kX86, avxvnni_runs, "AVX-VNNI + AVX2/FMA/F16C"},
    {kIsaAvx2, "avx2", kX86, [](const CpuFeatures& f) { return f.avx2; }, "AVX2 + FMA + F16C"},
    {kIsaI8mm, "i8mm", kArm, [](const CpuFeatures& f) { return f.neon && f.dotprod && f.i8mm; },
     "Advanced SIMD + dotprod (HWCAP_ASIMDDP) + int8 matrix multiply (HWCAP2_I8MM)"},
    {kIsaDotprod, "dotprod", kArm, [](const CpuFeatures& f) { return f.neon && f.dotprod; },
     "Advanced SIMD + dotprod (HWCAP_ASIMDDP)"},
    {kIsaNeon, "neon", kArm, [](const CpuFeatures& f) { return f.neon; }, "Advanced SIMD (NEON)"},
    {kIsaScalar, "scalar", true, [](const CpuFeatures&) { return true; }, ""},
};
static_assert(sizeof(kIsaTable) / sizeof(kIsaTable[0]) == kIsaCount, "one record per Isa");

constexpr bool records_in_enum_order() {
  for (int i = 0; i < kIsaCount; ++i)
    if (kIsaTable[i].isa != i) return false;
  return true;
}
static_assert(records_in_enum_order(), "record i of kIsaTable must be Isa i");

std::string names(bool built_only) {
  std::string out;
  for (const IsaRecord& r : kIsaTable)
    if (!built_only || r.built) out += std::string(out.empty() ? "" : ", ") + r.name;
  return out;
}

}  // namespace

const IsaRecord* isa_table() { return kIsaTable; }

const IsaRecord* select_isa(const char* forced, std::string* error) {
  const CpuFeatures& cpu = cpu_features();
  if (forced == nullptr || forced[0] == '\0') {
    for (const IsaRecord& r : kIsaTable)
      if (r.built && r.available(cpu)) return &r;
    return &kIsaTable[kIsaScalar];
  }
  for (const IsaRecord& r : kIsaTable) {
    if (std::strcmp(r.name, forced) != 0) continue;
    if (r.built && r.available(cpu)) return &r;
    if (error)
      *error = std::string("BITNET_ONNX_ISA=") + forced + ": this CPU lacks " + forced +
               (r.built ? " (needs " + std::string(r.needs) + ")" : " (kernels of this build: " + names(true) + ")");
    return nullptr;
  }
  if (error) *error = std::string("BITNET_ONNX_ISA=") + forced + ": unknown kernel name; expected one of " + names(false);
  return nullptr;
}

std::string isa_table_text() {
  const CpuFeatures& cpu = cpu_features();
  std::string out;
  for (const IsaRecord& r : kIsaTable)
    out += std::string(r.name) + '\t' + (r.built ? '1' : '0') + '\t' + (r.built && r.available(cpu) ? '1' : '0') +
           '\t' + r.needs + '\n';
  return out;
}

}  // namespace bitnet_onnx
