// Embeds token ids, or texts, with an exported bitnet-onnx model through the ONNX Runtime C++ API.
//
//   embed_cpp [--threads N] [--pad-side left|right] [--pad-id ID] LIBRARY MODEL IDS_FILE
//   embed_cpp [options] --no-op-library MODEL IDS_FILE     (ORT-native exports: --weights f32/f16/int8/nbits)
//   embed_cpp [--threads N] --text [--extensions EXT_LIBRARY] [--prompt P] (LIBRARY | --no-op-library)
//             TEXT_MODEL TEXTS_FILE
//
// Same arguments and output as examples/c/embed.c: LIBRARY is libbitnet_onnx_ops.so (registered
// with Ort::SessionOptions::RegisterCustomOpsLibrary), MODEL an exported model.onnx, IDS_FILE one
// text per line of token ids separated by spaces or commas ("-" reads stdin). Prints one line per
// text: its sentence_embedding. Errors (Ort::Exception included) print one line and exit 1. MODEL must
// import the bitnet_onnx domain version the library implements, checked before the session (model_opset.h).
// Strings in (--text), as in embed.c: TEXT_MODEL is an export's model_text.onnx (--text-input),
// EXT_LIBRARY onnxruntime-extensions' library (needed when the manifest says "text_needs_extensions":
// true), TEXTS_FILE one UTF-8 text per line ("\n" ends a line, an empty line is an empty text);
// --prompt feeds the graph's optional prompt input.
#define ORT_API_MANUAL_INIT  // check the runtime's API version ourselves instead of at static init
#include "model_opset.h"
#include "onnxruntime_cxx_api.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  int threads = 0;  // 0: ORT's default
  int64_t pad_id = 0;
  bool left = false, use_library = true;  // use_library false: --no-op-library
  std::string library, model, ids_file;
  std::string extensions, prompt;  // --extensions; --prompt (has_prompt)
  bool strings_in = false, has_prompt = false;  // strings_in: --text
};

long long parse_int(const std::string& flag, const char* value, long long lo, long long hi) {
  std::string text = value ? value : "";
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || v < lo || v > hi)
    throw Error(flag + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text +
                "'");
  return v;
}

Args parse_args(int argc, char** argv) {
  const std::string usage =
      "usage: embed_cpp [--threads N] [--pad-side left|right] [--pad-id ID] (LIBRARY | --no-op-library) MODEL "
      "IDS_FILE, or embed_cpp [--threads N] --text [--extensions EXT_LIBRARY] [--prompt P] "
      "(LIBRARY | --no-op-library) TEXT_MODEL TEXTS_FILE";
  Args args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--threads") {
      args.threads = static_cast<int>(parse_int(a, next, 1, std::numeric_limits<int>::max()));
      i++;
    } else if (a == "--pad-id") {
      args.pad_id = parse_int(a, next, 0, std::numeric_limits<int64_t>::max());
      i++;
    } else if (a == "--pad-side") {
      std::string side = next ? next : "";
      if (side != "left" && side != "right") throw Error("--pad-side must be 'left' or 'right'");
      args.left = side == "left";
      i++;
    } else if (a == "--text") {
      args.strings_in = true;
    } else if (a == "--extensions" || a == "--prompt") {
      if (next == nullptr) throw Error(a + " needs a value");
      (a == "--extensions" ? args.extensions : args.prompt) = next;
      args.has_prompt = args.has_prompt || a == "--prompt";
      i++;
    } else if (a == "--no-op-library") {
      args.use_library = false;
    } else if (a.rfind("--", 0) == 0) {
      throw Error(usage);
    } else {
      positional.push_back(a);
    }
  }
  size_t first = args.use_library ? 1 : 0;
  if (positional.size() != first + 2) throw Error(usage);
  if (args.use_library) args.library = positional[0];
  args.model = positional[first];
  args.ids_file = positional[first + 1];
  if (args.has_prompt && !args.strings_in) throw Error("--prompt needs --text (a strings-in model)");
  if (!args.extensions.empty() && !args.strings_in) throw Error("--extensions needs --text (a strings-in model)");
  return args;
}

// ORT would run a graph of any bitnet_onnx version with the library's ops: the version check is ours.
void check_model_domain_version(const std::string& model) {
  char error[1024];
  if (model_check_domain_version(model.c_str(), BITNET_ONNX_DOMAIN, BITNET_ONNX_DOMAIN_VERSION_FIRST,
                                 BITNET_ONNX_DOMAIN_VERSION_LAST, error, sizeof error) != 0)
    throw Error(error);
}

// One row of token ids per line; every line must hold at least one id.
std::vector<std::vector<int64_t>> read_ids(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) throw Error(path + ": cannot open");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::vector<int64_t>> texts;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); line_no++) {
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == '\r') ch = ' ';
    std::istringstream words(line);
    std::vector<int64_t> row;
    for (std::string word; words >> word;) {
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || v < 0)
        throw Error(path + ": line " + std::to_string(line_no) + ": '" + word.substr(0, 20) +
                    "' is not a non-negative token id");
      row.push_back(v);
    }
    if (row.empty())
      throw Error(path + ": line " + std::to_string(line_no) + ": no token ids (every line is one text)");
    texts.push_back(std::move(row));
  }
  if (in.bad()) throw Error(path + ": read error");
  if (texts.empty()) throw Error(path + ": no texts (expected one line of token ids per text)");
  return texts;
}

// Every line of a file as one text: the "\n" removed, every other byte kept.
std::vector<std::string> read_texts(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw Error(path + ": cannot open");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (line.find('\0') != std::string::npos)
      throw Error(path + ": line " + std::to_string(texts.size() + 1) + ": contains a NUL byte");
    texts.push_back(line);
  }
  if (in.bad()) throw Error(path + ": read error");
  return texts;
}

// The session with our op library and, with --extensions, onnxruntime-extensions' registered.
std::unique_ptr<Ort::Session> open_session(const Ort::Env& env, const Args& args) {
  Ort::SessionOptions options;
  if (args.threads > 0) options.SetIntraOpNumThreads(args.threads);
  // ORT loads each library, calls its RegisterCustomOps and unloads it with the options.
  try {
    if (args.use_library) options.RegisterCustomOpsLibrary(args.library.c_str());
  } catch (const Ort::Exception& e) {
    throw Error("op library " + args.library + ": RegisterCustomOpsLibrary failed: " + e.what());
  }
  try {
    if (!args.extensions.empty()) options.RegisterCustomOpsLibrary(args.extensions.c_str());
  } catch (const Ort::Exception& e) {
    throw Error("extensions library " + args.extensions + ": RegisterCustomOpsLibrary failed: " + e.what());
  }
  try {
    return std::make_unique<Ort::Session>(env, args.model.c_str(), options);
  } catch (const Ort::Exception& e) {
    throw Error("model " + args.model + ": session creation failed: " + e.what());
  }
}

// One row of T values per text, widened to float (exact for int8 / uint8).
template <typename T>
std::vector<std::vector<float>> rows_from(const T* values, size_t batch, int64_t width) {
  std::vector<std::vector<float>> rows(batch);
  for (size_t r = 0; r < batch; r++) rows[r].assign(values + r * width, values + (r + 1) * width);
  return rows;
}

// sentence_embedding as one row per text: float32 [batch, dimension], or the int8 / uint8 values of an
// --output-precision export (the manifest's "output_precision"), which print as integers.
std::vector<std::vector<float>> rows_of(const Ort::Value& output, size_t batch, const std::string& model) {
  auto info = output.GetTensorTypeAndShapeInfo();
  auto dims = info.GetShape();
  auto type = info.GetElementType();
  if (dims.size() != 2 || dims[0] != static_cast<int64_t>(batch))
    throw Error(model + ": sentence_embedding is not [" + std::to_string(batch) + ", width]");
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return rows_from(output.GetTensorData<float>(), batch, dims[1]);
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8) return rows_from(output.GetTensorData<int8_t>(), batch, dims[1]);
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8) return rows_from(output.GetTensorData<uint8_t>(), batch, dims[1]);
  throw Error(model + ": sentence_embedding is not float32, int8 or uint8 (type " + std::to_string(type) + ")");
}

// Strings in: the graph tokenizes, truncates, pads and builds the mask.
std::vector<std::vector<float>> embed_texts(const Args& args, const std::vector<std::string>& texts) {
  Ort::Env env(ORT_LOGGING_LEVEL_FATAL, "embed_cpp");
  auto session = open_session(env, args);
  Ort::AllocatorWithDefaultOptions allocator;
  std::vector<const char*> ptrs;
  for (const auto& t : texts) ptrs.push_back(t.c_str());
  const int64_t shape[1] = {static_cast<int64_t>(texts.size())};
  std::vector<Ort::Value> inputs;
  inputs.push_back(Ort::Value::CreateTensor(allocator, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING));
  if (!ptrs.empty()) inputs.back().FillStringTensor(ptrs.data(), ptrs.size());
  const char* input_names[2] = {"text", "prompt"};
  if (args.has_prompt) {
    const int64_t one[1] = {1};
    const char* prompt = args.prompt.c_str();
    inputs.push_back(Ort::Value::CreateTensor(allocator, one, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING));
    inputs.back().FillStringTensor(&prompt, 1);
  }
  const char* output_names[1] = {"sentence_embedding"};
  auto outputs = session->Run(Ort::RunOptions{nullptr}, input_names, inputs.data(), inputs.size(), output_names, 1);
  return rows_of(outputs[0], texts.size(), args.model);
}

std::vector<std::vector<float>> embed(const Args& args, const std::vector<std::vector<int64_t>>& texts) {
  Ort::Env env(ORT_LOGGING_LEVEL_FATAL, "embed_cpp");  // errors come back as exceptions, printed once
  auto session = open_session(env, args);

  // input_ids and attention_mask, int64 [batch, width], padded to the longest text.
  size_t batch = texts.size(), width = 0;
  for (const auto& t : texts) width = std::max(width, t.size());
  std::vector<int64_t> ids(batch * width, args.pad_id), mask(batch * width, 0);
  for (size_t r = 0; r < batch; r++) {
    size_t first = args.left ? width - texts[r].size() : 0;
    for (size_t c = 0; c < texts[r].size(); c++) {
      ids[r * width + first + c] = texts[r][c];
      mask[r * width + first + c] = 1;
    }
  }
  auto cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  const int64_t shape[2] = {static_cast<int64_t>(batch), static_cast<int64_t>(width)};
  Ort::Value inputs[2] = {Ort::Value::CreateTensor<int64_t>(cpu, ids.data(), ids.size(), shape, 2),
                          Ort::Value::CreateTensor<int64_t>(cpu, mask.data(), mask.size(), shape, 2)};
  const char* input_names[2] = {"input_ids", "attention_mask"};
  const char* output_names[1] = {"sentence_embedding"};
  auto outputs = session->Run(Ort::RunOptions{nullptr}, input_names, inputs, 2, output_names, 1);
  return rows_of(outputs[0], batch, args.model);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse_args(argc, argv);
    check_model_domain_version(args.model);
    const bool strings_in = args.strings_in;
    auto texts = strings_in ? std::vector<std::vector<int64_t>>{} : read_ids(args.ids_file);
    auto strings = strings_in ? read_texts(args.ids_file) : std::vector<std::string>{};
    // The headers' API version must exist in the loaded runtime (a newer runtime serves older ones).
    const OrtApi* api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    if (api == nullptr)
      throw Error(std::string("onnxruntime ") + OrtGetApiBase()->GetVersionString() +
                  " does not provide API version " + std::to_string(ORT_API_VERSION) +
                  " (these headers need onnxruntime >= 1." + std::to_string(ORT_API_VERSION) + ")");
    Ort::InitApi(api);
    for (const auto& row : strings_in ? embed_texts(args, strings) : embed(args, texts)) {
      for (size_t c = 0; c < row.size(); c++) std::printf(c ? " %.9g" : "%.9g", row[c]);
      std::putchar('\n');
    }
    if (std::fflush(stdout) != 0) throw Error("writing the embeddings failed");
  } catch (const Ort::Exception& e) {
    std::fprintf(stderr, "embed_cpp: onnxruntime error (code %d): %s\n", static_cast<int>(e.GetOrtErrorCode()),
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
