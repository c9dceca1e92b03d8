// The custom-op domain of this library (bitnet_onnx.customops.DOMAIN on the Python side). Its one
// opset version is 1 (DOMAIN_VERSION there); ONNX Runtime matches custom ops by name whatever
// version a graph imports, so checking the import is the host's job: bitnet_onnx.runtime refuses
// other versions (docs/op.md).
#pragma once

namespace bitnet_onnx {

inline constexpr const char* kDomain = "bitnet_onnx";

}  // namespace bitnet_onnx
