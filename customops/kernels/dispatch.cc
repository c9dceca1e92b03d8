// select_kernel: the best kernel this CPU runs, or the one BITNET_ONNX_ISA names.
#include <cstring>
#include <string>

#include "cpu_features.h"
#include "i2s_kernel.h"

namespace bitnet_onnx {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
#define BITNET_X86(kernel) kernel
#else
#define BITNET_X86(kernel) nullptr
#endif
#if defined(__aarch64__)
#define BITNET_ARM(kernel) kernel
#else
#define BITNET_ARM(kernel) nullptr
#endif

// Builds made with -DBITNET_ONNX_AVXVNNI_AS_EVEX=ON (kernel tests, benchmarks; never the shipped
// library) compile the avxvnni kernel with the EVEX encoding of the same ymm vpdpbusd, so that its
// code runs on CPUs with AVX512-VNNI but no AVX-VNNI (AMD Zen 4/5).
bool avxvnni_as_evex(const CpuFeatures& f) {
#if defined(BITNET_ONNX_AVXVNNI_AS_EVEX)
  return f.avx512vnni;
#else
  (void)f;
  return false;
#endif
}

struct Isa {
  const char* name;
  const I2SKernel* (*kernel)();  // null when this build's architecture has no such kernel
  bool (*available)(const CpuFeatures&);
  const char* needs;  // what the CPU lacks when unavailable (for the error message)
};

// THE list of kernel names (tests/cpu_isas.py and benchmarks/bench_op.py read it from here),
// best first: the default is the first one this build has and the CPU runs.
const Isa kIsas[] = {
    {"amx", BITNET_X86(amx_kernel), [](const CpuFeatures& f) { return f.amx; },
     "AMX-INT8 + AVX512-VNNI and the OS's tile-data permission (Linux >= 5.16)"},
    {"avx512vnni", BITNET_X86(avx512vnni_kernel), [](const CpuFeatures& f) { return f.avx512vnni; },
     "AVX512F/BW/VL/DQ/VNNI with OS-enabled zmm state"},
    {"avxvnni", BITNET_X86(avxvnni_kernel), [](const CpuFeatures& f) { return f.avxvnni || avxvnni_as_evex(f); },
     "AVX-VNNI + AVX2/FMA/F16C"},
    {"avx2", BITNET_X86(avx2_kernel), [](const CpuFeatures& f) { return f.avx2; }, "AVX2 + FMA + F16C"},
    {"neon", BITNET_ARM(neon_kernel), [](const CpuFeatures& f) { return f.neon; }, "Advanced SIMD (NEON)"},
    {"scalar", scalar_kernel, [](const CpuFeatures&) { return true; }, ""},
};

std::string names(bool built_only) {
  std::string out;
  for (const Isa& isa : kIsas)
    if (!built_only || isa.kernel) out += std::string(out.empty() ? "" : ", ") + isa.name;
  return out;
}

}  // namespace

const I2SKernel* select_kernel(const char* forced, std::string* error) {
  const CpuFeatures& cpu = cpu_features();
  const bool any = forced == nullptr || forced[0] == '\0';
  for (const Isa& isa : kIsas) {
    if (!any && std::strcmp(isa.name, forced) != 0) continue;
    if (isa.kernel && isa.available(cpu)) return isa.kernel();
    if (any) continue;
    if (error) {
      *error = std::string("BITNET_ONNX_ISA=") + forced + ": this CPU lacks " + forced +
               (isa.kernel ? " (needs " + std::string(isa.needs) + ")" : " (kernels of this build: " + names(true) + ")");
    }
    return nullptr;
  }
  if (any) return scalar_kernel();
  if (error) *error = std::string("BITNET_ONNX_ISA=") + forced + ": unknown kernel name; expected one of " + names(false);
  return nullptr;
}

}  // namespace bitnet_onnx
