// select_tile_ops: BITNET_ONNX_ISA's kernel names mapped onto the attention paths.
#include <cstring>
#include <string>

#include "attention.h"
#include "cpu_features.h"

namespace bitnet_onnx {
namespace attention {
namespace {

struct Path {
  const char* isa;  // a BITNET_ONNX_ISA value
  const TileOps* (*ops)();
  bool (*available)(const CpuFeatures&);
};

// Best first. AVX-512 F is all the avx512 path needs; the I2S names carry their own
// requirement, so a forced name is only accepted where its I2S kernel also runs.
const Path kPaths[] = {
#if defined(__x86_64__) || defined(_M_X64)
    {"amx", avx512_tile_ops, [](const CpuFeatures& f) { return f.amx; }},
    {"avx512vnni", avx512_tile_ops, [](const CpuFeatures& f) { return f.avx512vnni; }},
    {"avxvnni", avx2_tile_ops, [](const CpuFeatures& f) { return f.avxvnni; }},
    {"avx2", avx2_tile_ops, [](const CpuFeatures& f) { return f.avx2; }},
#endif
#if defined(__aarch64__)
    {"neon", scalar_tile_ops, [](const CpuFeatures& f) { return f.neon; }},
#endif
    {"scalar", scalar_tile_ops, [](const CpuFeatures&) { return true; }},
};

}  // namespace

const TileOps* select_tile_ops(const char* forced, std::string* error) {
  const CpuFeatures& cpu = cpu_features();
  if (forced == nullptr || forced[0] == '\0') {
    for (const Path& path : kPaths)
      if (path.available(cpu)) return path.ops();
    return scalar_tile_ops();
  }
  for (const Path& path : kPaths) {
    if (std::strcmp(path.isa, forced) != 0) continue;
    if (path.available(cpu)) return path.ops();
    if (error) *error = std::string("BITNET_ONNX_ISA=") + forced + ": this CPU lacks " + forced;
    return nullptr;
  }
  if (error)
    *error = std::string("BITNET_ONNX_ISA=") + forced +
             ": not a kernel of this build (expected one of scalar, avx2, avxvnni, avx512vnni, amx, neon)";
  return nullptr;
}

}  // namespace attention
}  // namespace bitnet_onnx
