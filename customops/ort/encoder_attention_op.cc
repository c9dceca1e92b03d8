// EncoderAttention: out[B, S, Hq*D] = softmax(scale * q.k^T over the allowed keys) . v, per
// query head, with grouped-query kv heads, a causal / sliding band and the attention mask.
// Reads the attributes, validates shapes and hands the call to the attention driver
// (kernels/attention/attention.h, attention::Attention), which picks the path, says when it falls
// back and runs the jobs on ORT's intra-op pool.
#include "encoder_attention_op.h"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention.h"
#include "op_template.h"

namespace bitnet_onnx {
namespace {

enum Input : size_t { kQ = 0, kK = 1, kV = 2, kMask = 3 };

// ORT's intra-op pool as the driver's ParallelFor.
void ort_parallel_for(void* pool, void (*job)(void*, size_t), size_t count, void* arg) {
  static_cast<Ort::KernelContext*>(pool)->ParallelFor(job, count, 0, arg);
}

// A string attribute; false when the node does not set it (or sets another type).
bool string_attribute(const OrtKernelInfo* info, const char* name, std::string* value) {
  size_t size = 0;
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_string(info, name, nullptr, &size)) {
    Ort::GetApi().ReleaseStatus(st);
    return false;
  }
  std::string out(size, '\0');
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_string(info, name, out.data(), &size)) {
    Ort::GetApi().ReleaseStatus(st);
    return false;
  }
  out.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  *value = out;
  return true;
}

}  // namespace

struct EncoderAttentionKernelState : OpKernel<EncoderAttentionKernelState> {
  static constexpr const char* kName = "EncoderAttention";
  static constexpr Port kInputs[] = {{"Q", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},
                                     {"K", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},
                                     {"V", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},
                                     {"attention_mask", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64}};
  static constexpr Port kOutputs[] = {{"out", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}};
  attention::Attention driver;  // the node's ISA and precision, fixed at init
  int64_t q_heads = 0, kv_heads = 0;
  bool has_scale = false;
  float scale = 0.0f;
  int64_t before = attention::kUnbounded, after = attention::kUnbounded;

  void init(const OrtKernelInfo* info);
  void compute(Ort::KernelContext& ctx) const;
};

void EncoderAttentionKernelState::compute(Ort::KernelContext& ctx) const {
  if (ctx.GetInputCount() != 4) throw InvalidInput{"expects 4 inputs (Q, K, V, attention_mask)"};
  Ort::ConstValue q = ctx.GetInput(kQ), k = ctx.GetInput(kK), v = ctx.GetInput(kV), mask = ctx.GetInput(kMask);
  const char* names[] = {"Q", "K", "V", "attention_mask"};
  const Ort::ConstValue* values[] = {&q, &k, &v, &mask};
  std::vector<int64_t> dims[4];
  for (int i = 0; i < 4; ++i) {
    if (!*values[i]) throw InvalidInput{std::string("input '") + names[i] + "' is missing"};
    auto info = values[i]->GetTensorTypeAndShapeInfo();
    const auto want = i == kMask ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    if (info.GetElementType() != want)
      throw InvalidInput{std::string("input '") + names[i] + "' must be " + (i == kMask ? "int64" : "float32")};
    dims[i] = info.GetShape();
    const size_t rank = i == kMask ? 2 : 3;
    if (dims[i].size() != rank)
      throw InvalidInput{std::string("input '") + names[i] + "' must be " +
                         (i == kMask ? "2-D [B, S]" : "3-D [B, S, heads * head_dim]") + ", got shape " +
                         shape_str(dims[i])};
  }
  const int64_t batch = dims[kQ][0], seq = dims[kQ][1];
  for (int i = 1; i < 4; ++i)
    if (dims[i][0] != batch || dims[i][1] != seq)
      throw InvalidInput{std::string("input '") + names[i] + "' has shape " + shape_str(dims[i]) +
                         " but Q has [B, S] = [" + std::to_string(batch) + ", " + std::to_string(seq) + "]"};
  const int64_t q_width = dims[kQ][2];
  if (q_width % q_heads != 0 || q_width == 0)
    throw InvalidInput{"input 'Q' last dimension " + std::to_string(q_width) + " is not num_heads (" +
                       std::to_string(q_heads) + ") x a positive head_dim"};
  const int64_t head_dim = q_width / q_heads;
  for (int i : {kK, kV})
    if (dims[i][2] != kv_heads * head_dim)
      throw InvalidInput{std::string("input '") + names[i] + "' last dimension is " + std::to_string(dims[i][2]) +
                         ", expected kv_num_heads x head_dim = " + std::to_string(kv_heads) + " x " +
                         std::to_string(head_dim) + " (head_dim from Q)"};

  float* out = ctx.GetOutput(0, dims[kQ]).GetTensorMutableData<float>();
  if (batch == 0 || seq == 0) return;

  attention::Problem p;
  p.q = q.GetTensorData<float>();
  p.k = k.GetTensorData<float>();
  p.v = v.GetTensorData<float>();
  p.mask = mask.GetTensorData<int64_t>();
  p.out = out;
  p.batch = batch;
  p.seq = seq;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.scale = has_scale ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  p.before = before;
  p.after = after;
  try {
    driver.run(p, attention::ParallelFor{&ctx, ort_parallel_for});
  } catch (const std::invalid_argument& e) {  // a forced ISA whose path does not take this head_dim
    throw InvalidInput{e.what()};
  }
}

namespace {

void init_state(EncoderAttentionKernelState& s, const OrtKernelInfo* raw) {
  const Ort::ConstKernelInfo info(raw);
  std::string error;
  // Read per kernel so a test can set os.environ between sessions.
  const char* forced_isa = std::getenv("BITNET_ONNX_ISA");
  if (!select_isa(forced_isa, &error)) throw InvalidInput{error};  // before the attributes, as ever

  if (!int_attribute(raw, "num_heads", &s.q_heads) || s.q_heads <= 0)
    throw InvalidInput{"attribute 'num_heads' must be set to a positive int"};
  if (!int_attribute(raw, "kv_num_heads", &s.kv_heads) || s.kv_heads <= 0)
    throw InvalidInput{"attribute 'kv_num_heads' must be set to a positive int"};
  if (s.q_heads % s.kv_heads != 0)
    throw InvalidInput{"attribute 'num_heads' (" + std::to_string(s.q_heads) + ") must be a multiple of " +
                       "'kv_num_heads' (" + std::to_string(s.kv_heads) + ")"};
  if (float_attribute(raw, "scale", &s.scale)) {
    if (!std::isfinite(s.scale)) throw InvalidInput{"attribute 'scale' must be finite"};
    s.has_scale = true;
  }
  int64_t causal = 0;
  int_attribute(raw, "causal", &causal);
  if (causal != 0 && causal != 1) throw InvalidInput{"attribute 'causal' must be 0 or 1"};
  const std::pair<const char*, int64_t*> spans[] = {{"window_left", &s.before}, {"window_right", &s.after}};
  for (const auto& [name, span] : spans) {
    if (!int_attribute(raw, name, span)) continue;  // absent: unbounded
    if (*span < 0) throw InvalidInput{std::string("attribute '") + name + "' must be >= 0 when set"};
  }
  if (causal) s.after = 0;  // the band is the intersection of causality and the window
  // precision: what q.k and p.v multiply (docs/attention.md); absent = f32, the op before the attribute.
  // "auto": the attention dispatch's rule for this host (attention::auto_precision), read per kernel so a
  // test can set BITNET_ONNX_ATTENTION_PRECISION between sessions.
  std::string precision = "f32";
  attention::Precision resolved = attention::Precision::kF32;
  int64_t as_int = 0;
  float as_float = 0.0f;
  if (!string_attribute(raw, "precision", &precision) &&
      (int_attribute(raw, "precision", &as_int) || float_attribute(raw, "precision", &as_float)))
    throw InvalidInput{"attribute 'precision' must be a string, \"f32\", \"bf16\" or \"auto\""};
  if (precision == "bf16") {
    resolved = attention::Precision::kBf16;
  } else if (precision == "auto") {
    if (!attention::auto_precision(forced_isa, std::getenv(attention::kPrecisionEnv), &resolved, &error))
      throw InvalidInput{error};
  } else if (precision != "f32") {
    throw InvalidInput{"attribute 'precision' must be \"f32\", \"bf16\" or \"auto\", got \"" + precision + "\""};
  }
  s.driver = attention::Attention(forced_isa, resolved);
}

}  // namespace

void EncoderAttentionKernelState::init(const OrtKernelInfo* info) { init_state(*this, info); }

OrtCustomOp* encoder_attention_op() { return op_definition<EncoderAttentionKernelState>(); }

}  // namespace bitnet_onnx
