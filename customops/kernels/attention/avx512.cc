// AVX-512 tile ops (16 floats a vector; 6 x 4 register blocks of 32 zmm registers): simd_tiles.h's
// templates over simd/x86.h's Zmm.
#include "simd/x86.h"
#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

using simd::Zmm;

const TileOps kAvx512 = {"avx512", Zmm::kFloats, scores<Zmm, 6, 4>, softmax<Zmm, 4>, pv<Zmm, 6, 4>,
                          softmax_bf16<Zmm, 4>};

}  // namespace

const TileOps* avx512_tile_ops() { return &kAvx512; }

}  // namespace attention
}  // namespace bitnet_onnx
