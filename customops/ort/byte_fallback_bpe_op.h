// The ByteFallbackBpe custom op (domain "bitnet_onnx", version 1) for ONNX Runtime: strings in,
// the HF `tokenizers` ids of SentencePiece-style BPE tokenizers (Gemma3's) out. Contract: docs/op.md.
#pragma once

#include "ort_api.h"

namespace bitnet_onnx {

// The op definition, in static storage (ORT keeps the raw pointer for the process lifetime).
OrtCustomOp* byte_fallback_bpe_op();

}  // namespace bitnet_onnx
