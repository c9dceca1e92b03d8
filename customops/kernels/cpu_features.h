// What this CPU (and its OS) can run: CPUID + XGETBV (+ the AMX permission request) on x86-64,
// getauxval(AT_HWCAP, AT_HWCAP2) on aarch64. The one place that detects CPU features; detected once; no ORT
// headers.
#pragma once

namespace bitnet_onnx {

struct CpuFeatures {
  // x86-64 (each flag already includes the OS saving the register state it needs)
  bool avx2 = false;        // AVX2 + FMA + F16C, ymm state enabled
  bool avxvnni = false;     // AVX-VNNI (VEX vpdpbusd on ymm) on top of avx2
  bool avx512vnni = false;  // AVX512 F/BW/VL/DQ/VNNI + FMA + F16C, zmm/opmask state enabled
  bool amx = false;         // AMX-TILE + AMX-INT8 on top of avx512vnni, tile state enabled in XCR0
                            // and (Linux) granted to this process by arch_prctl
  bool avx512bf16 = false;  // AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16) on top of avx512vnni
  bool avx512vnni_gfni = false;  // GFNI (vgf2p8affineqb, EVEX form) on top of avx512vnni: Ice Lake and Zen 4 on,
                                 // not Cascade or Cooper Lake
  bool amxbf16 = false;     // AMX-BF16 (tdpbf16ps) on top of amx
  // The x86 CPU class, for rules measured on one class only (attention/dispatch.cc's auto precision)
  bool amd = false;            // CPUID vendor "AuthenticAMD"
  unsigned x86_family = 0;     // CPUID display family (base + extended): AMD Zen 4 0x19, Zen 5 0x1a
  // aarch64
  bool neon = false;     // Advanced SIMD
  bool dotprod = false;  // SDOT/UDOT (ARMv8.2 dotprod), HWCAP_ASIMDDP
  bool i8mm = false;     // SMMLA/UMMLA/USMMLA (ARMv8.6 FEAT_I8MM), HWCAP2_I8MM
};

const CpuFeatures& cpu_features();

}  // namespace bitnet_onnx
