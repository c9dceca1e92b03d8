// select_kernel: the best kernel this CPU runs, or the one BITNET_ONNX_ISA names.
#include <cstring>
#include <string>

#include "cpu_features.h"
#include "i2s_kernel.h"

namespace bitnet_onnx {
namespace {

struct Isa {
  const char* name;
  const I2SKernel* (*kernel)();
  bool (*available)(const CpuFeatures&);
  const char* needs;  // what the CPU lacks when unavailable (for the error message)
};

// Best first; the default is the first one available.
const Isa kIsas[] = {
#if defined(__x86_64__) || defined(_M_X64)
    {"amx", amx_kernel, [](const CpuFeatures& f) { return f.avx512vnni && amx_usable(); },
     "AMX-INT8 + AVX512-VNNI and the OS's tile-data permission (Linux >= 5.16)"},
    {"avx512vnni", avx512vnni_kernel, [](const CpuFeatures& f) { return f.avx512vnni; },
     "AVX512F/BW/VL/DQ/VNNI with OS-enabled zmm state"},
    {"avxvnni", avxvnni_kernel, [](const CpuFeatures& f) { return f.avxvnni; }, "AVX-VNNI + AVX2/FMA/F16C"},
    {"avx2", avx2_kernel, [](const CpuFeatures& f) { return f.avx2; }, "AVX2 + FMA + F16C"},
#endif
#if defined(__aarch64__)
    {"neon", neon_kernel, [](const CpuFeatures& f) { return f.neon; }, "Advanced SIMD (NEON)"},
#endif
    {"scalar", scalar_kernel, [](const CpuFeatures&) { return true; }, ""},
};

// Every name BITNET_ONNX_ISA accepts on any build, so a name valid elsewhere gets "not this CPU".
const char* const kAllNames[] = {"scalar", "avx2", "avxvnni", "avx512vnni", "amx", "neon"};

}  // namespace

const I2SKernel* select_kernel(const char* forced, std::string* error) {
  const CpuFeatures& cpu = cpu_features();
  if (forced == nullptr || forced[0] == '\0') {
    for (const Isa& isa : kIsas)
      if (isa.available(cpu)) return isa.kernel();
    return scalar_kernel();
  }
  for (const Isa& isa : kIsas) {
    if (std::strcmp(isa.name, forced) != 0) continue;
    if (isa.available(cpu)) return isa.kernel();
    if (error) *error = std::string("BITNET_ONNX_ISA=") + forced + ": this CPU lacks " + forced + " (needs " + isa.needs + ")";
    return nullptr;
  }
  bool known = false;
  for (const char* name : kAllNames) known = known || std::strcmp(name, forced) == 0;
  std::string here;
  for (const Isa& isa : kIsas) here += std::string(here.empty() ? "" : ", ") + isa.name;
  if (error) {
    *error = std::string("BITNET_ONNX_ISA=") + forced +
             (known ? ": this CPU lacks " + std::string(forced) + " (kernels of this build: " + here + ")"
                    : ": unknown kernel name; expected one of scalar, avx2, avxvnni, avx512vnni, amx, neon");
  }
  return nullptr;
}

}  // namespace bitnet_onnx
