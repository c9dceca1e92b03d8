// I2STernaryMatMul: Y[..., N] = BitLinear(X[..., K]; W I2_S [N, K/4], scale, norm_weight?).
// Validates inputs, gets the output and hands both to the I2S driver (kernels/i2s/driver.h),
// which runs the selected kernel on ORT's intra-op pool.
#include "i2s_matmul_op.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver.h"
#include "isa.h"
#include "op_template.h"
#include "onnxruntime_float16.h"

namespace bitnet_onnx {
namespace {

enum Input : size_t { kX = 0, kW = 1, kScale = 2, kNorm = 3 };
constexpr float kDefaultEps = 1e-6f;

// Norm weight of length k as float32, from an f32 or f16 tensor.
std::vector<float> norm_to_f32(const Ort::ConstValue& v, int64_t k) {
  auto info = v.GetTensorTypeAndShapeInfo();
  const auto dims = info.GetShape();
  if (dims.size() != 1 || dims[0] != k)
    throw InvalidInput{"input 'norm_weight' must have shape [K] = [" + std::to_string(k) + "], got " + shape_str(dims)};
  std::vector<float> out(static_cast<size_t>(k));
  switch (info.GetElementType()) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      std::memcpy(out.data(), v.GetTensorData<float>(), out.size() * sizeof(float));
      break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: {
      const Ort::Float16_t* h = v.GetTensorData<Ort::Float16_t>();
      for (int64_t i = 0; i < k; ++i) out[i] = h[i].ToFloat();
      break;
    }
    default:
      throw InvalidInput{"input 'norm_weight' must be float32 or float16 (ONNX element type " +
                         std::to_string(static_cast<int>(info.GetElementType())) + ")"};
  }
  return out;
}

// Shape of W checked against K; returns N.
int64_t check_w(const std::vector<int64_t>& dims, int64_t k) {
  if (dims.size() != 2)
    throw InvalidInput{"input 'W' must be 2-D [N, K/4] uint8, got shape " + shape_str(dims)};
  if (dims[1] * 4 != k)
    throw InvalidInput{"input 'W' has " + std::to_string(dims[1]) + " bytes per row (shape " + shape_str(dims) +
                       "), expected K/4 = " + std::to_string(k / 4) + " for K = " + std::to_string(k)};
  return dims[0];
}

void check_k(int64_t k, const char* source) {
  if (k <= 0 || k % i2s::kBlock != 0)
    throw InvalidInput{std::string(source) + ": K = " + std::to_string(k) + " must be a positive multiple of 128"};
  if (k > i2s::kMaxK)
    throw InvalidInput{std::string(source) + ": K = " + std::to_string(k) + " is beyond " + std::to_string(i2s::kMaxK) +
                       ", the widest K the kernels sum exactly"};
}

// ORT's intra-op pool as the driver's ParallelFor.
void ort_parallel_for(void* pool, void (*job)(void*, size_t), size_t count, void* arg) {
  static_cast<Ort::KernelContext*>(pool)->ParallelFor(job, count, 0, arg);
}

}  // namespace

struct I2SMatMulKernelState : OpKernel<I2SMatMulKernelState> {
  static constexpr const char* kName = "I2STernaryMatMul";
  static constexpr Port kInputs[] = {{"X", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},
                                     {"W", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8},
                                     {"scale", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},
                                     // float32 or float16, checked at run time
                                     {"norm_weight", ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED, /*optional=*/true}};
  static constexpr Port kOutputs[] = {{"Y", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}};

  float eps = kDefaultEps;
  // The node's kernels, with a constant W (an initializer) packed once into their layouts.
  i2s::MatMul matmul;
  // Constant norm_weight, converted to float32 once.
  bool norm_const = false;
  std::vector<float> norm;

  void init(const OrtKernelInfo* info);
  void compute(Ort::KernelContext& ctx) const;
};

void I2SMatMulKernelState::compute(Ort::KernelContext& ctx) const {
  const size_t inputs = ctx.GetInputCount();
  auto input = [&](size_t i) { return i < inputs ? ctx.GetInput(i) : Ort::ConstValue(nullptr); };
  Ort::ConstValue x = input(kX), w = input(kW), scale = input(kScale), norm_in = input(kNorm);
  if (!x) throw InvalidInput{"input 'X' is missing"};
  if (!w) throw InvalidInput{"input 'W' is missing"};
  if (!scale) throw InvalidInput{"input 'scale' is missing"};

  // X [..., K]
  const std::vector<int64_t> x_dims = x.GetTensorTypeAndShapeInfo().GetShape();
  if (x_dims.empty()) throw InvalidInput{"input 'X' must have rank >= 1 ([..., K]), got a scalar"};
  const int64_t k = x_dims.back();
  check_k(k, "input 'X' last dimension");
  int64_t m = 1;
  for (size_t i = 0; i + 1 < x_dims.size(); ++i) m *= x_dims[i];

  // W [N, K/4]: constant (already repacked) or fed at run time.
  int64_t n;
  if (matmul.has_weights()) {
    if (matmul.weights_k() != k)
      throw InvalidInput{"input 'W' is for K = " + std::to_string(matmul.weights_k()) + " but input 'X' has K = " +
                         std::to_string(k) + " (X shape " + shape_str(x_dims) + ")"};
    n = matmul.weights_n();
  } else {
    n = check_w(w.GetTensorTypeAndShapeInfo().GetShape(), k);
  }

  // scale: one float32, shape [1] or a scalar.
  const auto s_dims = scale.GetTensorTypeAndShapeInfo().GetShape();
  if (s_dims.size() > 1 || scale.GetTensorTypeAndShapeInfo().GetElementCount() != 1)
    throw InvalidInput{"input 'scale' must hold one float32 of shape [1], got shape " + shape_str(s_dims)};
  const float s_w = *scale.GetTensorData<float>();

  std::vector<float> norm_rt;
  const float* norm = nullptr;
  if (norm_const) {
    if (static_cast<int64_t>(this->norm.size()) != k)
      throw InvalidInput{"input 'norm_weight' has length " + std::to_string(this->norm.size()) +
                         " but input 'X' has K = " + std::to_string(k)};
    norm = this->norm.data();
  } else if (norm_in) {
    auto info = norm_in.GetTensorTypeAndShapeInfo();
    const auto dims = info.GetShape();
    if (info.GetElementType() == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT && dims.size() == 1 && dims[0] == k) {
      norm = norm_in.GetTensorData<float>();  // used in place
    } else {
      norm_rt = norm_to_f32(norm_in, k);  // converts f16, or reports what is wrong
      norm = norm_rt.data();
    }
  }

  std::vector<int64_t> y_dims(x_dims.begin(), x_dims.end() - 1);
  y_dims.push_back(n);
  float* y = ctx.GetOutput(0, y_dims).GetTensorMutableData<float>();
  i2s::Call call;
  call.x = x.GetTensorData<float>();
  call.m = m;
  call.k = k;
  call.n = n;
  call.w_i2s = matmul.has_weights() ? nullptr : w.GetTensorData<uint8_t>();
  call.norm = norm;
  call.eps = eps;
  call.s_w = s_w;
  call.y = y;
  matmul.run(call, i2s::ParallelFor{&ctx, ort_parallel_for});
}

namespace {

// A constant input (initializer) at `index`, or a null value.
Ort::ConstValue constant_input(const Ort::ConstKernelInfo& info, size_t index) {
  if (index >= info.GetInputCount()) return Ort::ConstValue(nullptr);
  int is_constant = 0;
  const OrtValue* v = nullptr;
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetConstantInput_tensor(info, index, &is_constant, &v)) {
    Ort::GetApi().ReleaseStatus(st);  // e.g. an omitted optional input: not a constant
    return Ort::ConstValue(nullptr);
  }
  return is_constant && v ? Ort::ConstValue(v) : Ort::ConstValue(nullptr);
}

// An attribute `name` of another type than float (int, string or a list): reading it as float
// failed for its type, not because it is absent.
bool has_non_float_attribute(const OrtKernelInfo* raw, const char* name) {
  const OrtApi& api = Ort::GetApi();
  auto found = [&api](OrtStatus* st) {
    if (st == nullptr) return true;
    api.ReleaseStatus(st);
    return false;
  };
  int64_t i = 0;
  size_t size = 0;
  return found(api.KernelInfoGetAttribute_int64(raw, name, &i)) ||
         found(api.KernelInfoGetAttribute_string(raw, name, nullptr, &size)) ||
         found(api.KernelInfoGetAttributeArray_float(raw, name, nullptr, &size)) ||
         found(api.KernelInfoGetAttributeArray_int64(raw, name, nullptr, &size));
}

}  // namespace

void I2SMatMulKernelState::init(const OrtKernelInfo* raw) {
  const Ort::ConstKernelInfo info(raw);
  // Read per kernel so a test can set os.environ between sessions.
  std::string error;
  const IsaRecord* isa = select_isa(std::getenv("BITNET_ONNX_ISA"), &error);
  if (!isa) throw InvalidInput{error};
  try {
    matmul = i2s::MatMul(isa->isa, std::getenv("BITNET_ONNX_KERNEL"));
  } catch (const std::invalid_argument& e) {
    throw InvalidInput{e.what()};
  }

  eps = kDefaultEps;  // attribute absent -> default (the C++ GetAttribute would throw)
  if (!float_attribute(raw, "epsilon", &eps)) {
    eps = kDefaultEps;
    if (has_non_float_attribute(raw, "epsilon")) throw InvalidInput{"attribute 'epsilon' must be a float"};
  }
  if (!(eps >= 0.0f) || std::isinf(eps))
    throw InvalidInput{"attribute 'epsilon' must be a finite float >= 0, got " + std::to_string(eps)};

  if (Ort::ConstValue w = constant_input(info, kW)) {
    const auto dims = w.GetTensorTypeAndShapeInfo().GetShape();
    if (dims.size() != 2) throw InvalidInput{"input 'W' must be 2-D [N, K/4] uint8, got shape " + shape_str(dims)};
    check_k(dims[1] * 4, "input 'W' (4 x bytes per row)");
    matmul.set_weights(w.GetTensorData<uint8_t>(), dims[0], dims[1] * 4);
  }
  if (Ort::ConstValue norm = constant_input(info, kNorm)) {
    const auto dims = norm.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t len = dims.size() == 1 ? dims[0] : -1;
    if (len < 0) throw InvalidInput{"input 'norm_weight' must be 1-D [K], got shape " + shape_str(dims)};
    this->norm = norm_to_f32(norm, len);
    norm_const = true;
  }
}

OrtCustomOp* i2s_ternary_matmul_op() { return op_definition<I2SMatMulKernelState>(); }

}  // namespace bitnet_onnx
