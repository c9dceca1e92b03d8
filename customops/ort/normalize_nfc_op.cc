// NormalizeNFC: text (strings, any shape) -> the same shape of strings in Unicode NFC. The tables
// (attributes, from Python's unicodedata at export) are validated and indexed once per kernel.
#include "normalize_nfc_op.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nfc.h"
#include "op_template.h"

namespace bitnet_onnx {

struct NormalizeNfcKernelState : OpKernel<NormalizeNfcKernelState> {
  static constexpr const char* kName = "NormalizeNFC";
  static constexpr Port kInputs[] = {{"text", ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING}};
  static constexpr Port kOutputs[] = {{"normalized", ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING}};
  std::unique_ptr<text::NfcNormalizer> nfc;

  void init(const OrtKernelInfo* info);
  void compute(Ort::KernelContext& ctx) const;
};

void NormalizeNfcKernelState::compute(Ort::KernelContext& ctx) const {
  if (ctx.GetInputCount() != 1) throw InvalidInput{"expects 1 input (text)"};
  Ort::ConstValue input = ctx.GetInput(0);
  if (!input) throw InvalidInput{"input 'text' is missing"};
  auto info = input.GetTensorTypeAndShapeInfo();
  if (info.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) throw InvalidInput{"input 'text' must be strings"};
  const std::vector<int64_t> dims = info.GetShape();
  const size_t count = info.GetElementCount();
  Ort::UnownedValue output = ctx.GetOutput(0, dims);
  if (count == 0) return;

  // All strings in one buffer: element i is bytes[offsets[i], offsets[i + 1]).
  const size_t total = input.GetStringTensorDataLength();
  std::string bytes(total, '\0');
  std::vector<size_t> offsets(count + 1);
  input.GetStringTensorContent(bytes.data(), total, offsets.data(), count);
  offsets[count] = total;

  text::NfcScratch scratch;
  std::string normalized;
  for (size_t i = 0; i < count; ++i) {
    if (offsets[i] > offsets[i + 1] || offsets[i + 1] > total)
      throw InvalidInput{"input 'text': inconsistent string offsets from ONNX Runtime"};
    const std::string_view element(bytes.data() + offsets[i], offsets[i + 1] - offsets[i]);
    text::Utf8Error error;
    if (!nfc->normalize(element, &normalized, &error, &scratch))
      throw InvalidInput{"input 'text' element " + std::to_string(i) + " (row-major) is not valid UTF-8: " +
                         error.problem + " at byte " + std::to_string(error.byte_offset)};
    if (normalized.empty()) continue;  // output elements start empty
    char* out = output.GetResizedStringTensorElementBuffer(i, normalized.size());
    std::memcpy(out, normalized.data(), normalized.size());
  }
}

namespace {

// A required ints attribute holding `width`-int entries; `layout` describes one entry for errors.
// Empty is refused too: ORT reads an attribute of another type (floats) as an empty list, and
// real tables are never empty.
std::vector<int64_t> int_table(const Ort::ConstKernelInfo& info, const char* name, size_t width, const char* layout) {
  const std::string expected = std::string("a non-empty list of ints, ") + layout +
                               " per entry (bitnet_onnx.customops.normalize_nfc.nfc_tables())";
  std::vector<int64_t> values;
  try {
    values = info.GetAttributes<int64_t>(name);
  } catch (const Ort::Exception&) {
  }
  if (values.empty()) throw InvalidInput{std::string("attribute '") + name + "' must be set to " + expected};
  if (values.size() % width != 0)
    throw InvalidInput{std::string("attribute '") + name + "' has " + std::to_string(values.size()) +
                       " ints, not a multiple of " + std::to_string(width) + " (" + expected + ")"};
  return values;
}

text::NfcTables read_tables(const Ort::ConstKernelInfo& info) {
  text::NfcTables tables;
  const auto classes = int_table(info, "combining_classes", 2, "[code point, class]");
  for (size_t k = 0; k < classes.size(); k += 2) tables.combining_classes.push_back({classes[k], classes[k + 1]});
  const auto decompositions = int_table(info, "decompositions", 3, "[code point, first, second or -1]");
  for (size_t k = 0; k < decompositions.size(); k += 3)
    tables.decompositions.push_back({decompositions[k], decompositions[k + 1], decompositions[k + 2]});
  const auto compositions = int_table(info, "compositions", 3, "[first, second, composite]");
  for (size_t k = 0; k < compositions.size(); k += 3)
    tables.compositions.push_back({compositions[k], compositions[k + 1], compositions[k + 2]});
  return tables;
}

void init_state(NormalizeNfcKernelState& s, const OrtKernelInfo* raw) {
  const Ort::ConstKernelInfo info(raw);
  text::NfcTableError error;
  s.nfc = text::NfcNormalizer::build(read_tables(info), &error);
  if (!s.nfc)
    throw InvalidInput{std::string("attribute '") + error.table + "' entry " + std::to_string(error.entry) + ": " +
                       error.problem};
}

}  // namespace

void NormalizeNfcKernelState::init(const OrtKernelInfo* info) { init_state(*this, info); }

OrtCustomOp* normalize_nfc_op() { return op_definition<NormalizeNfcKernelState>(); }

}  // namespace bitnet_onnx
