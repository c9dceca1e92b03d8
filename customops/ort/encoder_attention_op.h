// The EncoderAttention custom op (domain "bitnet_onnx", version 1) for ONNX Runtime.
// Contract: docs/attention.md.
#pragma once

#include "ort_api.h"

namespace bitnet_onnx {

// The op definition, in static storage (ORT keeps the raw pointer for the process lifetime).
OrtCustomOp* encoder_attention_op();

}  // namespace bitnet_onnx
