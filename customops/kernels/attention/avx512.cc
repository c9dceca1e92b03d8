// AVX-512 tile ops (16 floats a vector; 6 x 4 register blocks of 32 zmm registers).
#include <immintrin.h>

#include "v512.h"

namespace bitnet_onnx {
namespace attention {
namespace {

const TileOps kAvx512 = {"avx512", V512::width, scores<V512, 6, 4>, softmax<V512, 4>, pv<V512, 6, 4>,
                          softmax_bf16<V512, 4>};

}  // namespace

const TileOps* avx512_tile_ops() { return &kAvx512; }

}  // namespace attention
}  // namespace bitnet_onnx
