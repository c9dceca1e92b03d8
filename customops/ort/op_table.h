// The ops of the "bitnet_onnx" domain: one row per op. Registration (register.cc) and the
// library's op list (bitnet_onnx_op_names, read by Python) both iterate this table, so adding an
// op is one row here plus its own files (docs/contributing.md, "Add a custom op").
#pragma once

#include "byte_fallback_bpe_op.h"
#include "domain.h"
#include "encoder_attention_op.h"
#include "i2s_matmul_op.h"
#include "normalize_nfc_op.h"
#include "ort_api.h"

namespace bitnet_onnx {

struct OpRow {
  const char* name;             // the node's op_type, as in the ONNX graph
  OrtCustomOp* (*definition)();  // the op definition, in static storage
};

inline constexpr OpRow kOpTable[] = {
    {"I2STernaryMatMul", i2s_ternary_matmul_op},
    {"EncoderAttention", encoder_attention_op},
    {"ByteFallbackBpe", byte_fallback_bpe_op},
    {"NormalizeNFC", normalize_nfc_op},
};

}  // namespace bitnet_onnx
