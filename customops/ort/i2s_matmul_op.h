// The I2STernaryMatMul custom op (domain "bitnet_onnx", version 1) for ONNX Runtime.
// Contract: docs/op.md.
#pragma once

#include "ort_api.h"

namespace bitnet_onnx {

// The op definition, in static storage (ORT keeps the raw pointer for the process lifetime).
OrtCustomOp* i2s_ternary_matmul_op();

}  // namespace bitnet_onnx
