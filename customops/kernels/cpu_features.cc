#include "cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>

#include <cstdint>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

namespace bitnet_onnx {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

// XCR0: which register states the OS saves on context switch. Inline asm so this file needs
// no -mxsave; only called after CPUID reports OSXSAVE.
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux hands out the 8 KB AMX tile data state only after a per-process request.
bool os_permits_tiles() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx))  // vendor: "Auth" "enti" "cAMD" in ebx, edx, ecx
    f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const unsigned base_family = (eax >> 8) & 0xf;
  f.x86_family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
  const bool fma = bit(ecx, 12), osxsave = bit(ecx, 27), avx = bit(ecx, 28), f16c = bit(ecx, 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;   // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!os_ymm || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = bit(ebx, 5), avx512f = bit(ebx, 16), avx512dq = bit(ebx, 17),
             avx512bw = bit(ebx, 30), avx512vl = bit(ebx, 31), avx512vnni = bit(ecx, 11), gfni = bit(ecx, 8);
  const bool amx_tile = bit(edx, 24), amx_int8 = bit(edx, 25), amx_bf16 = bit(edx, 22);
  const bool os_tiles = (xcr0 & (3u << 17)) == (3u << 17);  // XTILECFG + XTILEDATA
  const unsigned max_sub = eax;
  bool avxvnni = false, avx512bf16 = false;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    avxvnni = bit(eax, 4);
    avx512bf16 = bit(eax, 5);
  }

  f.avx2 = avx2 && fma && f16c;
  f.avxvnni = f.avx2 && avxvnni;
  f.avx512vnni = f.avx2 && os_zmm && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni;
  f.avx512bf16 = f.avx512vnni && avx512bf16;
  f.avx512vnni_gfni = f.avx512vnni && gfni;
  f.amx = f.avx512vnni && amx_tile && amx_int8 && os_tiles && os_permits_tiles();
  f.amxbf16 = f.amx && amx_bf16;
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  f.neon = (hw & HWCAP_ASIMD) != 0;
  f.dotprod = (hw & HWCAP_ASIMDDP) != 0;
  f.i8mm = (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
  f.neon = true;  // Advanced SIMD is mandatory on AArch64
#endif
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures(); }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace bitnet_onnx
