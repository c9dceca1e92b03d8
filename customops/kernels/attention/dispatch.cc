// select_tile_ops: each record of the ISA table (isa.h) mapped onto an attention path.
#include <string>

#include "attention.h"
#include "isa.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// AVX-512 F is all the avx512 path needs and AVX2 + FMA the avx2 one; a forced name is accepted
// where the ISA table says the CPU runs it, so each path's needs are covered. The aarch64 ISAs
// (i8mm, dotprod, neon) have no attention path of their own: scalar. Null only where the record is not built.
const IsaRow<TileOps> kPaths[] = {
    /*kIsaAmx=*/BITNET_ONNX_X86(avx512_tile_ops),
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512_tile_ops),
    /*kIsaAvxVnni=*/BITNET_ONNX_X86(avx2_tile_ops),
    /*kIsaAvx2=*/BITNET_ONNX_X86(avx2_tile_ops),
    /*kIsaI8mm=*/scalar_tile_ops,
    /*kIsaDotprod=*/scalar_tile_ops,
    /*kIsaNeon=*/scalar_tile_ops,
    /*kIsaScalar=*/scalar_tile_ops,
};

}  // namespace

const TileOps* tile_ops(Isa isa) { return isa_row(kPaths, isa); }

const TileOps* select_tile_ops(const char* forced, std::string* error) {
  return select_isa_row(kPaths, forced, error);
}

}  // namespace attention
}  // namespace bitnet_onnx
