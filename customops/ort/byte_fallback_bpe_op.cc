// ByteFallbackBpe: text [N] strings -> input_ids, attention_mask [N, S] int64 (S = the longest
// row, right-padded with 0), no special tokens added. The tables (attributes) are validated and
// indexed once per kernel; rows are tokenized as jobs on ORT's intra-op pool.
#include "byte_fallback_bpe_op.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "bpe.h"
#include "op_template.h"

namespace bitnet_onnx {
namespace {

struct Job {
  const text::ByteFallbackBpe* bpe;
  const std::string* bytes;             // all rows, back to back
  const std::vector<size_t>* offsets;   // row i is bytes[offsets[i], offsets[i + 1])
  size_t max_tokens;
  std::vector<text::BpeResult>* results;
  std::atomic<bool> out_of_memory{false};
};

void encode_row(void* p, size_t row) {
  Job& job = *static_cast<Job*>(p);
  const size_t begin = (*job.offsets)[row], end = (*job.offsets)[row + 1];
  try {
    (*job.results)[row] = job.bpe->encode(std::string_view(*job.bytes).substr(begin, end - begin), job.max_tokens);
  } catch (const std::bad_alloc&) {
    job.out_of_memory = true;
  }
}

}  // namespace

struct ByteFallbackBpeKernelState : OpKernel<ByteFallbackBpeKernelState> {
  static constexpr const char* kName = "ByteFallbackBpe";
  static constexpr Port kInputs[] = {{"text", ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING}};
  static constexpr Port kOutputs[] = {{"input_ids", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64},
                                      {"attention_mask", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64}};
  std::unique_ptr<text::ByteFallbackBpe> bpe;
  int64_t max_length = 0;

  void init(const OrtKernelInfo* info);
  void compute(Ort::KernelContext& ctx) const;
};

void ByteFallbackBpeKernelState::compute(Ort::KernelContext& ctx) const {
  if (ctx.GetInputCount() != 1) throw InvalidInput{"expects 1 input (text)"};
  Ort::ConstValue input = ctx.GetInput(0);
  if (!input) throw InvalidInput{"input 'text' is missing"};
  auto info = input.GetTensorTypeAndShapeInfo();
  if (info.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING)
    throw InvalidInput{"input 'text' must be a string tensor"};
  const std::vector<int64_t> dims = info.GetShape();
  if (dims.size() != 1) throw InvalidInput{"input 'text' must be 1-D [N], got shape " + shape_str(dims)};
  const auto rows = static_cast<size_t>(dims[0]);

  // All rows in one buffer: row i is bytes[offsets[i], offsets[i + 1]).
  const size_t total = rows ? input.GetStringTensorDataLength() : 0;
  std::string bytes(total, '\0');
  std::vector<size_t> offsets(rows + 1, 0);
  if (rows) input.GetStringTensorContent(bytes.data(), total, offsets.data(), rows);
  offsets[rows] = total;
  for (size_t i = 0; i < rows; ++i)
    if (offsets[i] > offsets[i + 1]) throw InvalidInput{"input 'text': inconsistent string offsets from ONNX Runtime"};

  std::vector<text::BpeResult> results(rows);
  Job job;
  job.bpe = bpe.get();
  job.bytes = &bytes;
  job.offsets = &offsets;
  job.max_tokens = static_cast<size_t>(max_length);
  job.results = &results;
  if (rows > 1)
    ctx.ParallelFor(encode_row, rows, 0, &job);
  else if (rows == 1)
    encode_row(&job, 0);
  if (job.out_of_memory) throw std::bad_alloc();

  size_t longest = 0;
  for (size_t i = 0; i < rows; ++i) {
    if (!results[i].ok()) throw InvalidInput{"input 'text' row " + std::to_string(i) + " is " + results[i].error};
    longest = std::max(longest, results[i].ids.size());
  }
  const std::vector<int64_t> out_dims = {static_cast<int64_t>(rows), static_cast<int64_t>(longest)};
  int64_t* ids = ctx.GetOutput(0, out_dims).GetTensorMutableData<int64_t>();
  int64_t* mask = ctx.GetOutput(1, out_dims).GetTensorMutableData<int64_t>();
  for (size_t i = 0; i < rows; ++i) {
    const std::vector<int64_t>& row = results[i].ids;
    std::copy(row.begin(), row.end(), ids + i * longest);
    std::fill(ids + i * longest + row.size(), ids + (i + 1) * longest, 0);
    std::fill(mask + i * longest, mask + i * longest + row.size(), 1);
    std::fill(mask + i * longest + row.size(), mask + (i + 1) * longest, 0);
  }
}

namespace {

// A 0/1 attribute (absent: 0).
bool flag_attribute(const OrtKernelInfo* info, const char* name) {
  int64_t value = 0;
  int_attribute(info, name, &value);
  if (value != 0 && value != 1) throw InvalidInput{std::string("attribute '") + name + "' must be 0 or 1"};
  return value == 1;
}

// Reads an ints attribute into *values; false when the node does not set it.
bool ints_attribute(const OrtKernelInfo* info, const char* name, std::vector<int64_t>* values) {
  const OrtApi& api = Ort::GetApi();
  size_t size = 0;
  if (OrtStatus* st = api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &size)) {
    api.ReleaseStatus(st);
    return false;
  }
  values->resize(size);
  if (size) Ort::ThrowOnError(api.KernelInfoGetAttributeArray_int64(info, name, values->data(), &size));
  return true;
}

// Reads a 1-D string TENSOR attribute (the ORT C API reads no STRINGS attribute) into *values;
// false when the node has no tensor attribute of that name.
bool strings_attribute(const OrtKernelInfo* info, const char* name, std::vector<std::string>* values) {
  const OrtApi& api = Ort::GetApi();
  Ort::AllocatorWithDefaultOptions allocator;
  OrtValue* raw = nullptr;
  if (OrtStatus* st = api.KernelInfoGetAttribute_tensor(info, name, allocator, &raw)) {
    api.ReleaseStatus(st);
    return false;
  }
  const Ort::Value tensor(raw);
  const auto type = tensor.GetTensorTypeAndShapeInfo();
  if (type.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING || type.GetShape().size() != 1)
    throw InvalidInput{std::string("attribute '") + name + "' must be a 1-D string tensor, got shape " +
                       shape_str(type.GetShape()) + " of ONNX element type " +
                       std::to_string(static_cast<int>(type.GetElementType()))};
  const size_t count = type.GetElementCount();
  values->clear();
  if (count == 0) return true;
  const size_t total = tensor.GetStringTensorDataLength();
  std::string bytes(total, '\0');
  std::vector<size_t> offsets(count + 1);
  tensor.GetStringTensorContent(bytes.data(), total, offsets.data(), count);
  offsets[count] = total;
  values->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (offsets[i] > offsets[i + 1]) throw InvalidInput{std::string("attribute '") + name + "': inconsistent string offsets"};
    values->emplace_back(bytes, offsets[i], offsets[i + 1] - offsets[i]);
  }
  return true;
}

void init_state(ByteFallbackBpeKernelState& s, const OrtKernelInfo* raw) {
  const Ort::ConstKernelInfo info(raw);
  text::BpeTables tables;
  if (!strings_attribute(raw, "vocab", &tables.vocab))
    throw InvalidInput{"attribute 'vocab' must be set to a 1-D string tensor (token i has id i, or vocab_ids[i])"};
  ints_attribute(raw, "vocab_ids", &tables.vocab_ids);
  ints_attribute(raw, "merges", &tables.merges);
  const bool has_added = strings_attribute(raw, "added_tokens", &tables.added_tokens);
  const bool has_added_ids = ints_attribute(raw, "added_token_ids", &tables.added_token_ids);
  if (has_added != has_added_ids)
    throw InvalidInput{has_added ? "attribute 'added_tokens' is set but 'added_token_ids' is not"
                                 : "attribute 'added_token_ids' is set but 'added_tokens' (a 1-D string tensor) is not"};
  int_attribute(raw, "unk_id", &tables.unk_id);
  tables.fuse_unk = flag_attribute(raw, "fuse_unk");
  tables.byte_fallback = flag_attribute(raw, "byte_fallback");
  size_t size = 0;
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_string(raw, "space_replacement", nullptr, &size)) {
    Ort::GetApi().ReleaseStatus(st);  // absent: the default, "▁"
  } else {
    tables.space_replacement = info.GetAttribute<std::string>("space_replacement");
  }
  if (int_attribute(raw, "max_length", &s.max_length) && s.max_length < 0)
    throw InvalidInput{"attribute 'max_length' must be >= 0 (0: no limit)"};

  text::BpeTableError error;
  s.bpe = text::ByteFallbackBpe::build(tables, &error);
  if (!s.bpe) throw InvalidInput{std::string("attribute '") + error.attribute + "': " + error.problem};
}

}  // namespace

void ByteFallbackBpeKernelState::init(const OrtKernelInfo* info) { init_state(*this, info); }

OrtCustomOp* byte_fallback_bpe_op() { return op_definition<ByteFallbackBpeKernelState>(); }

}  // namespace bitnet_onnx
