// AVX2 + FMA tile ops (8 floats a vector; 6 x 2 register blocks of 16 ymm registers): simd_tiles.h's
// templates over simd/x86.h's Ymm.
#include "simd/x86.h"
#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

using simd::Ymm;

const TileOps kAvx2 = {"avx2", Ymm::kFloats, scores<Ymm, 6, 2>, softmax<Ymm>, pv<Ymm, 6, 2>, softmax_bf16<Ymm>};

}  // namespace

const TileOps* avx2_tile_ops() { return &kAvx2; }

}  // namespace attention
}  // namespace bitnet_onnx
