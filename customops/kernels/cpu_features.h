// What this CPU (and its OS) can run: CPUID + XGETBV on x86-64, getauxval(AT_HWCAP) on aarch64.
// Detected once; no ORT headers.
#pragma once

namespace bitnet_onnx {

struct CpuFeatures {
  // x86-64 (each flag already includes the OS saving the register state it needs)
  bool avx2 = false;        // AVX2 + FMA + F16C, ymm state enabled
  bool avxvnni = false;     // AVX-VNNI (VEX vpdpbusd on ymm) on top of avx2
  bool avx512vnni = false;  // AVX512 F/BW/VL/DQ/VNNI + FMA + F16C, zmm/opmask state enabled
  // aarch64
  bool neon = false;     // Advanced SIMD
  bool dotprod = false;  // SDOT/UDOT (ARMv8.2 dotprod)
};

const CpuFeatures& cpu_features();

}  // namespace bitnet_onnx
