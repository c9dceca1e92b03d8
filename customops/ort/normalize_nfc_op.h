// The NormalizeNFC custom op (domain "bitnet_onnx", version 1) for ONNX Runtime: Unicode NFC of
// a string tensor, with the Unicode tables as attributes. Contract: docs/op.md, "NormalizeNFC".
#pragma once

#include "ort_api.h"

namespace bitnet_onnx {

// The op definition, in static storage (ORT keeps the raw pointer for the process lifetime).
OrtCustomOp* normalize_nfc_op();

}  // namespace bitnet_onnx
