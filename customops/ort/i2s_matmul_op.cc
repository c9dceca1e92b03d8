// I2STernaryMatMul: Y[..., N] = BitLinear(X[..., K]; W I2_S [N, K/4], scale, norm_weight?).
// Validates inputs, quantizes all rows once, then runs the selected kernel over (token tile x
// output tile) jobs on ORT's intra-op pool and applies y = (float(sum) / a[m]) * s_w.
#include "i2s_matmul_op.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "i2s_kernel.h"
#include "op_errors.h"
#include "onnxruntime_float16.h"

namespace bitnet_onnx {
namespace {

enum Input : size_t { kX = 0, kW = 1, kScale = 2, kNorm = 3 };
constexpr int64_t kBlock = 128;
// The widest K every kernel sums exactly (tests/test_op_validation.py checks it on each ISA):
// the largest multiple of 128 whose sums |sum_k q * T| <= 128 * K fit int32, i.e. K < 2^24. The
// kernels' int32 lanes wrap, so partial sums of unsigned codes (up to 2 * 128 * K) and the qsum
// correction are exact modulo 2^32, hence exact once the result fits (int16 sums are bounded per
// block, whatever K). The one step that is not modular, the x86 one-token path's rescaling
// shifts, serves K <= 2^19 only (x86_dot.h). Real projections have K <= 16384.
constexpr int64_t kMaxK = (int64_t{1} << 24) - kBlock;
constexpr float kDefaultEps = 1e-6f;
// Rows per quantization job: split across threads only when there is enough work.
constexpr int64_t kQuantRowsPerJob = 64;
// The dot's (token tile x output tile) jobs: when the kernel's own tiles give fewer than kMinJobs,
// output tiles are halved (down to the kernel's min_tile_n, in multiples of kTileNAlign so that
// tile edges fall on whole 16- and 32-row panels and on cache lines of y) so that ORT's pool can
// balance them across threads (e.g. Gemma3's k/v projections, N = 256, are one 256x256 tile).
constexpr int64_t kMinJobs = 8;
constexpr int64_t kTileNAlign = 32;

// Cache-line aligned bytes for a repacked weight matrix (SIMD kernels may use aligned loads).
struct AlignedBytes {
  std::unique_ptr<uint8_t, void (*)(void*)> ptr{nullptr, std::free};
  size_t size = 0;
  explicit AlignedBytes(size_t n = 0) : size(n) {
    if (n) {
      ptr.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64)));
      if (!ptr) throw std::bad_alloc();
    }
  }
  uint8_t* data() const { return ptr.get(); }
};

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
  if (k <= 0 || k % kBlock != 0)
    throw InvalidInput{std::string(source) + ": K = " + std::to_string(k) + " must be a positive multiple of 128"};
  if (k > kMaxK)
    throw InvalidInput{std::string(source) + ": K = " + std::to_string(k) + " is beyond " + std::to_string(kMaxK) +
                       ", the widest K the kernels sum exactly"};
}

// Everything one Compute call's jobs read; jobs write disjoint parts of y.
struct Job {
  const I2SKernel* kernel;
  const uint8_t* packed;
  int64_t m, n, k;
  QuantizedRows rows;
  int64_t tile_m, tile_n;  // job grid (tile_n may be finer than the kernel's)
  int64_t tiles_m, tiles_n;
  float s_w;
  float* y;
  // quantization
  const float* x;
  const float* norm;
  float eps;
  int8_t* q;
  float* a;
  int32_t* qsum;
  std::atomic<bool> failed{false};
};

void quantize_job(void* p, size_t i) {
  Job& job = *static_cast<Job*>(p);
  const int64_t r0 = static_cast<int64_t>(i) * kQuantRowsPerJob;
  const int64_t r1 = std::min(job.m, r0 + kQuantRowsPerJob);
  job.kernel->quantize(job.x + r0 * job.k, r1 - r0, job.k, job.norm, job.eps, job.q + r0 * job.k, job.a + r0,
                       job.qsum + r0);
}

// Job index -> (n tile, m tile), n outer: consecutive jobs on one thread reuse a weight tile.
void dot_job(void* p, size_t i) {
  Job& job = *static_cast<Job*>(p);
  const I2SKernel& kern = *job.kernel;
  const int64_t ti = static_cast<int64_t>(i);
  const int64_t m0 = (ti % job.tiles_m) * job.tile_m, m1 = std::min(job.m, m0 + job.tile_m);
  const int64_t n0 = (ti / job.tiles_m) * job.tile_n, n1 = std::min(job.n, n0 + job.tile_n);
  if (kern.dot_scaled) {
    kern.dot_scaled(job.packed, job.n, job.k, job.rows, job.s_w, m0, m1, n0, n1, job.y + m0 * job.n + n0, job.n);
    return;
  }
  const int64_t ld = n1 - n0;
  // Per-thread scratch, reused across calls: no allocation or zeroing per job (matters at M = 1).
  thread_local std::vector<int32_t> sums;
  try {
    const size_t need = static_cast<size_t>((m1 - m0) * ld);
    if (sums.size() < need) sums.resize(need);
  } catch (...) {
    job.failed = true;
    return;
  }
  kern.dot(job.packed, job.n, job.k, job.rows, m0, m1, n0, n1, sums.data(), ld);
  for (int64_t r = m0; r < m1; ++r) {
    const float a = job.a[r];
    float* yr = job.y + r * job.n + n0;
    const int32_t* sr = sums.data() + (r - m0) * ld;
    for (int64_t c = 0; c < ld; ++c) yr[c] = (static_cast<float>(sr[c]) / a) * job.s_w;
  }
}

}  // namespace

struct I2SMatMulKernelState {
  std::string node;  // for error messages
  const I2SKernel* kernel = nullptr;
  float eps = kDefaultEps;
  // Constant W (an initializer), repacked once into the kernel's layout.
  bool w_const = false;
  int64_t w_n = 0, w_k = 0;
  AlignedBytes w_packed;
  // Constant norm_weight, converted to float32 once.
  bool norm_const = false;
  std::vector<float> norm;

  OrtStatusPtr ComputeV2(OrtKernelContext* context) const;
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
  if (w_const) {
    if (w_k != k)
      throw InvalidInput{"input 'W' is for K = " + std::to_string(w_k) + " but input 'X' has K = " + std::to_string(k) +
                         " (X shape " + shape_str(x_dims) + ")"};
    n = w_n;
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
  if (m == 0 || n == 0) return;

  AlignedBytes w_rt;
  const uint8_t* packed = w_packed.data();
  if (!w_const) {
    w_rt = AlignedBytes(kernel->packed_bytes(n, k));
    kernel->repack(w.GetTensorData<uint8_t>(), n, k, w_rt.data());
    packed = w_rt.data();
  }

  // Uninitialized (quantize writes every element).
  std::unique_ptr<int8_t[]> q(new int8_t[static_cast<size_t>(m * k)]);
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(m)]);
  std::unique_ptr<int32_t[]> qsum(new int32_t[static_cast<size_t>(m)]);
  Job job;
  job.kernel = kernel;
  job.packed = packed;
  job.m = m;
  job.n = n;
  job.k = k;
  job.x = x.GetTensorData<float>();
  job.norm = norm;
  job.eps = eps;
  job.q = q.get();
  job.a = a.get();
  job.qsum = qsum.get();
  job.rows = QuantizedRows{q.get(), a.get(), qsum.get(), m, k};
  job.tile_m = kernel->tile_m;
  job.tiles_m = (m + job.tile_m - 1) / job.tile_m;
  job.tile_n = kernel->tile_n;
  auto tiles = [](int64_t size, int64_t tile) { return (size + tile - 1) / tile; };
  while (job.tiles_m * tiles(n, job.tile_n) < kMinJobs && kernel->min_tile_n > 0 && job.tile_n > kernel->min_tile_n)
    job.tile_n = std::max(kernel->min_tile_n, (job.tile_n / 2 + kTileNAlign - 1) / kTileNAlign * kTileNAlign);
  job.tiles_n = tiles(n, job.tile_n);
  job.s_w = s_w;
  job.y = y;

  const size_t quant_jobs = static_cast<size_t>((m + kQuantRowsPerJob - 1) / kQuantRowsPerJob);
  if (quant_jobs > 1)
    ctx.ParallelFor(quantize_job, quant_jobs, 0, &job);
  else
    quantize_job(&job, 0);

  const size_t dot_jobs = static_cast<size_t>(job.tiles_m * job.tiles_n);
  if (dot_jobs > 1)
    ctx.ParallelFor(dot_job, dot_jobs, 0, &job);
  else
    dot_job(&job, 0);
  if (job.failed) throw std::bad_alloc();
}

OrtStatusPtr I2SMatMulKernelState::ComputeV2(OrtKernelContext* context) const {
  return status_of("I2STernaryMatMul", node, [&] {
    Ort::KernelContext ctx(context);
    compute(ctx);
  });
}

namespace {

struct I2STernaryMatMulOp : Ort::CustomOpBase<I2STernaryMatMulOp, I2SMatMulKernelState, /*WithStatus=*/true> {
  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const;

  const char* GetName() const { return "I2STernaryMatMul"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }

  size_t GetInputTypeCount() const { return 4; }  // X, W, scale, norm_weight
  ONNXTensorElementDataType GetInputType(size_t index) const {
    switch (index) {
      case kX:
      case kScale:
        return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
      case kW:
        return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
      default:
        return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // float32 or float16, checked at run time
    }
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index == kNorm ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }

  size_t GetOutputTypeCount() const { return 1; }  // Y
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

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

void init_state(I2SMatMulKernelState& s, const OrtKernelInfo* raw) {
  const Ort::ConstKernelInfo info(raw);
  s.node = info.GetNodeName();
  // Read per kernel so a test can set os.environ between sessions.
  std::string error;
  s.kernel = select_kernel(std::getenv("BITNET_ONNX_ISA"), &error);
  if (!s.kernel) throw InvalidInput{error};

  s.eps = kDefaultEps;  // attribute absent -> default (the C++ GetAttribute would throw)
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_float(raw, "epsilon", &s.eps)) {
    Ort::GetApi().ReleaseStatus(st);
    s.eps = kDefaultEps;
    if (has_non_float_attribute(raw, "epsilon")) throw InvalidInput{"attribute 'epsilon' must be a float"};
  }
  if (!(s.eps >= 0.0f) || std::isinf(s.eps))
    throw InvalidInput{"attribute 'epsilon' must be a finite float >= 0, got " + std::to_string(s.eps)};

  if (Ort::ConstValue w = constant_input(info, kW)) {
    const auto dims = w.GetTensorTypeAndShapeInfo().GetShape();
    if (dims.size() != 2) throw InvalidInput{"input 'W' must be 2-D [N, K/4] uint8, got shape " + shape_str(dims)};
    s.w_k = dims[1] * 4;
    check_k(s.w_k, "input 'W' (4 x bytes per row)");
    s.w_n = dims[0];
    s.w_packed = AlignedBytes(s.kernel->packed_bytes(s.w_n, s.w_k));
    if (s.w_n > 0) s.kernel->repack(w.GetTensorData<uint8_t>(), s.w_n, s.w_k, s.w_packed.data());
    s.w_const = true;
  }
  if (Ort::ConstValue norm = constant_input(info, kNorm)) {
    const auto dims = norm.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t len = dims.size() == 1 ? dims[0] : -1;
    if (len < 0) throw InvalidInput{"input 'norm_weight' must be 1-D [K], got shape " + shape_str(dims)};
    s.norm = norm_to_f32(norm, len);
    s.norm_const = true;
  }
}

OrtStatusPtr I2STernaryMatMulOp::CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
  return create_kernel<I2SMatMulKernelState>(
      api, "I2STernaryMatMul", [info](I2SMatMulKernelState& state) { init_state(state, info); }, kernel);
}

}  // namespace

OrtCustomOp* i2s_ternary_matmul_op() {
  static I2STernaryMatMulOp op;
  return &op;
}

}  // namespace bitnet_onnx
