// The library's exported symbols: RegisterCustomOps adds the "bitnet_onnx" domain to a session's
// options (SessionOptions.register_custom_ops_library / RegisterCustomOpsLibrary), and
// bitnet_onnx_op_names lists the domain's ops, bitnet_onnx_kernel_names the kernel ISA table and
// bitnet_onnx_attention_auto_precision what EncoderAttention's precision "auto" runs, for tools (Python
// reads them with ctypes).
#include <exception>
#include <mutex>
#include <string>

#include "attention.h"
#include "isa.h"
#include "op_table.h"
#include "ort_api.h"

namespace {

// Created once, never freed: sessions keep raw pointers to the domain and its ops, and a
// destructor at unload could run after ORT itself is gone.
Ort::CustomOpDomain* domain() {
  static Ort::CustomOpDomain* d = [] {
    auto* created = new Ort::CustomOpDomain(bitnet_onnx::kDomain);
    for (const auto& row : bitnet_onnx::kOpTable) created->Add(row.definition());
    return created;
  }();
  return d;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    // An older runtime than our headers: report it through the oldest API, which every release has.
    const OrtApi* v1 = api_base->GetApi(1);
    return v1 ? v1->CreateStatus(ORT_FAIL, "bitnet_onnx ops need onnxruntime >= 1.21 (ORT API 21)") : nullptr;
  }
  static std::once_flag init;
  std::call_once(init, [api] { Ort::InitApi(api); });
  try {
    Ort::UnownedSessionOptions(options).Add(*domain());
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, (std::string("bitnet_onnx: registering ops failed: ") + e.what()).c_str());
  }
  return nullptr;
}

// "domain:op1,op2,...": what this build of the library registers. Needs no ORT runtime.
extern "C" __attribute__((visibility("default"))) const char* bitnet_onnx_op_names() {
  static const std::string names = [] {
    std::string s = std::string(bitnet_onnx::kDomain) + ":";
    for (const auto& row : bitnet_onnx::kOpTable) s += std::string(s.back() == ':' ? "" : ",") + row.name;
    return s;
  }();
  return names.c_str();
}

// The ISA table (kernels/isa.h, isa_table_text): one line per kernel ISA, best first,
// "name\tbuilt\truns\tneeds" (built: this build has its kernels; runs: this CPU runs them).
// Needs no ORT runtime.
extern "C" __attribute__((visibility("default"))) const char* bitnet_onnx_kernel_names() {
  static const std::string text = bitnet_onnx::isa_table_text();
  return text.c_str();
}

// What EncoderAttention's precision = "auto" runs on this CPU (attention::auto_precision, the rule the op
// applies), with BITNET_ONNX_ISA = forced_isa and BITNET_ONNX_ATTENTION_PRECISION = forced_precision (null
// or empty: unset; the caller passes its environment's values, or another process's): "f32" or "bf16", or
// else the one-line error the op would fail session creation with. Needs no ORT runtime.
extern "C" __attribute__((visibility("default"))) const char* bitnet_onnx_attention_auto_precision(
    const char* forced_isa, const char* forced_precision) {
  thread_local std::string error;  // the text returned stays valid until this thread's next call
  bitnet_onnx::attention::Precision precision;
  if (!bitnet_onnx::attention::auto_precision(forced_isa, forced_precision, &precision, &error)) return error.c_str();
  return bitnet_onnx::attention::precision_name(precision);
}
