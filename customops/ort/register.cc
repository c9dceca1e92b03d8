// The library's exported symbols: RegisterCustomOps adds the "bitnet_onnx" domain to a session's
// options (SessionOptions.register_custom_ops_library / RegisterCustomOpsLibrary), and
// bitnet_onnx_op_names lists the domain's ops, bitnet_onnx_kernel_names the kernel ISA table,
// bitnet_onnx_attention_auto_precision what EncoderAttention's precision "auto" runs and
// bitnet_onnx_attention_path which tile ops it runs for a head dim, bitnet_onnx_dispatch the whole dispatch
// as JSON, for tools (Python reads them with ctypes).
#include <exception>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "dispatch_description.h"
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

// The path EncoderAttention runs (attention::Attention::path_for, the driver's own choice) for a node of
// `precision` ("f32", "bf16" or "auto") and a head dim (decimal text), with BITNET_ONNX_ISA = forced_isa and
// BITNET_ONNX_ATTENTION_PRECISION = forced_precision (null or empty: unset): "path<TAB>why it fell back"
// (the second field empty when the ISA's own path runs; a forced ISA then refuses the call instead), or
// else a one-line error (no tab) as the op would give it. Needs no ORT runtime.
extern "C" __attribute__((visibility("default"))) const char* bitnet_onnx_attention_path(
    const char* forced_isa, const char* forced_precision, const char* precision, const char* head_dim) {
  using bitnet_onnx::attention::Precision;
  thread_local std::string answer;  // valid until this thread's next call
  const std::string name = precision ? precision : "";
  char* end = nullptr;
  const long long dim = head_dim ? std::strtoll(head_dim, &end, 10) : 0;
  if (!head_dim || end == head_dim || *end != '\0' || dim <= 0) return "head_dim must be a positive integer";
  Precision resolved = Precision::kF32;
  if (name == "bf16") {
    resolved = Precision::kBf16;
  } else if (name == "auto") {
    if (!bitnet_onnx::attention::auto_precision(forced_isa, forced_precision, &resolved, &answer)) return answer.c_str();
  } else if (name != "f32") {
    return "precision must be f32, bf16 or auto";
  }
  try {
    const bitnet_onnx::attention::PathChoice choice =
        bitnet_onnx::attention::Attention(forced_isa, resolved).path_for(dim);
    answer = choice.path.name() + "\t" + choice.fallback;
  } catch (const std::exception& e) {
    answer = e.what();
  }
  return answer.c_str();
}

// The library's whole dispatch (kernels/dispatch_description.h: every ISA's kernels per family and attention
// paths, the families and their rules, the ISA picked by default) and what it picks with BITNET_ONNX_ISA =
// forced_isa, BITNET_ONNX_KERNEL = forced_family and BITNET_ONNX_ATTENTION_PRECISION = forced_precision (null or
// empty: unset), with the family one call of `shape` ("M,K,N"; null or empty: none) runs, as one JSON text;
// else, when memory runs out, a one-line error that is not JSON. Needs no ORT runtime.
extern "C" __attribute__((visibility("default"))) const char* bitnet_onnx_dispatch(
    const char* forced_isa, const char* forced_family, const char* forced_precision, const char* shape) {
  thread_local std::string text;  // valid until this thread's next call
  try {
    text = bitnet_onnx::dispatch_description(forced_isa, forced_family, forced_precision, shape);
  } catch (const std::exception&) {
    return "bitnet_onnx_dispatch: out of memory";
  }
  return text.c_str();
}
