// The custom-op domain of this library and the versions of it the ops implement
// (bitnet_onnx.customops.DOMAIN / DOMAIN_VERSION on the Python side, DOMAIN_VERSIONS in
// export/builder.py; tests/test_recipe_customops.py checks they agree). Every op declares this
// range to ONNX Runtime (OrtCustomOp::GetStartVersion / GetEndVersion, op_template.h). ORT does
// not refuse a graph importing a later version for it: it resolves every import from 1 to 1000
// to the one schema of the op, so the host checks the import (docs/op.md, "Version").
#pragma once

namespace bitnet_onnx {

inline constexpr const char* kDomain = "bitnet_onnx";
// The domain's versions the ops implement: only version 1 so far.
inline constexpr int kDomainVersionFirst = 1;
inline constexpr int kDomainVersionLast = 1;

}  // namespace bitnet_onnx
