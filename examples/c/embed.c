/* Embeds token ids, or texts, with an exported bitnet-onnx model through the ONNX Runtime C API.
 *
 *   embed_c [--threads N] [--pad-side left|right] [--pad-id ID] LIBRARY MODEL IDS_FILE
 *   embed_c [options] --no-op-library MODEL IDS_FILE     (ORT-native exports: --weights f32/f16/int8/nbits)
 *   embed_c [--threads N] --text [--extensions EXT_LIBRARY] [--prompt P] (LIBRARY | --no-op-library)
 *           TEXT_MODEL TEXTS_FILE
 *
 * Strings in (--text): TEXT_MODEL is model_text.onnx of an export made with --text-input, which
 * tokenizes in the graph: with our ops (NormalizeNFC, ByteFallbackBpe) and, when the manifest says
 * "text_needs_extensions": true, onnxruntime-extensions' HfJsonTokenizer: EXT_LIBRARY is that
 * library, registered like ours. TEXTS_FILE holds one UTF-8 text per line (only "\n" ends a line;
 * an empty line is an empty text; no lines is an empty batch); --prompt feeds the graph's optional
 * prompt input.
 *
 * LIBRARY   the op library, libbitnet_onnx_ops.so (registered with RegisterCustomOpsLibrary_V2)
 * MODEL     model.onnx of a folder written by `bitnet-onnx export`
 * IDS_FILE  one text per line, its token ids separated by spaces or commas ("-" reads stdin);
 *           the ids are what bitnet_onnx's TextTokenizer gives (EOS already appended)
 *
 * The texts run as one batch, padded to the longest with --pad-id on --pad-side (the manifest's
 * pad_token_id and padding_side; the mask makes the padding invisible either way). Prints one
 * line per text: the sentence_embedding values (integers for an --output-precision export). Every OrtStatus is checked; any error prints one
 * line to stderr and exits 1 (the process exit releases what was allocated). MODEL must import the
 * bitnet_onnx domain version the library implements, checked before the session (model_opset.h:
 * ORT does not check it).
 */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_opset.h"
#include "onnxruntime_c_api.h"

static const char* PROG = "embed_c";
static const OrtApi* api;

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", PROG);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static const char* code_name(OrtErrorCode code) {
  static const char* names[] = {"OK", "FAIL", "INVALID_ARGUMENT", "NO_SUCHFILE", "NO_MODEL", "ENGINE_ERROR",
                                "RUNTIME_EXCEPTION", "INVALID_PROTOBUF", "MODEL_LOADED", "NOT_IMPLEMENTED",
                                "INVALID_GRAPH", "EP_FAIL"};
  return (unsigned)code < sizeof names / sizeof names[0] ? names[code] : "UNKNOWN";
}

/* Every ORT call goes through this: a non-NULL status is an error naming the step. */
static void check(OrtStatus* status, const char* step) {
  if (status == NULL) return;
  OrtErrorCode code = api->GetErrorCode(status);
  char message[2048];
  snprintf(message, sizeof message, "%s", api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  die("%s failed (%s): %s", step, code_name(code), message);
}

static void* xrealloc(void* p, size_t n) {
  void* q = realloc(p, n ? n : 1);
  if (q == NULL) die("out of memory");
  return q;
}

/* Token ids of every non-empty line, as rows of a ragged table. */
typedef struct {
  int64_t** ids;
  size_t* lengths;
  size_t rows;
} Texts;

static void parse_line(const char* path, size_t line_no, char* line, Texts* texts) {
  int64_t* row = NULL;
  size_t n = 0;
  char* p = line;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r' || *p == '\n') p++;
    if (*p == '\0') break;
    char* end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    size_t word = strcspn(p, " \t,\r\n");
    if (end != p + word || errno == ERANGE || v < 0)
      die("%s: line %zu: '%.*s' is not a non-negative token id", path, line_no, (int)(word > 40 ? 40 : word), p);
    row = xrealloc(row, (n + 1) * sizeof *row);
    row[n++] = (int64_t)v;
    p = end;
  }
  if (n == 0) die("%s: line %zu: no token ids (every line is one text)", path, line_no);
  texts->ids = xrealloc(texts->ids, (texts->rows + 1) * sizeof *texts->ids);
  texts->lengths = xrealloc(texts->lengths, (texts->rows + 1) * sizeof *texts->lengths);
  texts->ids[texts->rows] = row;
  texts->lengths[texts->rows] = n;
  texts->rows++;
}

static Texts read_ids(const char* path) {
  FILE* f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
  if (f == NULL) die("%s: cannot open (%s)", path, strerror(errno));
  Texts texts = {NULL, NULL, 0};
  char* line = NULL;
  size_t cap = 0, line_no = 0;
  while (getline(&line, &cap, f) != -1) parse_line(path, ++line_no, line, &texts);
  if (ferror(f)) die("%s: read error", path);
  free(line);
  if (f != stdin) fclose(f);
  if (texts.rows == 0) die("%s: no texts (expected one line of token ids per text)", path);
  return texts;
}

static long parse_int(const char* flag, const char* value, long lo, long hi) {
  char* end;
  errno = 0;
  long v = value ? strtol(value, &end, 10) : 0;
  if (value == NULL || *value == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    die("%s needs an integer in [%ld, %ld], got '%s'", flag, lo, hi, value ? value : "");
  return v;
}

/* Every line of a file as one text (the "\n" removed, every other byte kept as it is). */
static char** read_texts(const char* path, size_t* count) {
  FILE* f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
  if (f == NULL) die("%s: cannot open (%s)", path, strerror(errno));
  char** texts = NULL;
  char* line = NULL;
  size_t cap = 0, n = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) != -1) {
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    if (memchr(line, '\0', (size_t)len) != NULL) die("%s: line %zu: contains a NUL byte", path, n + 1);
    texts = xrealloc(texts, (n + 1) * sizeof *texts);
    texts[n] = xrealloc(NULL, (size_t)len + 1);
    memcpy(texts[n++], line, (size_t)len + 1);
  }
  if (ferror(f)) die("%s: read error", path);
  free(line);
  if (f != stdin) fclose(f);
  *count = n;
  return texts;
}

/* A string tensor [count] holding copies of the texts (ORT owns them). */
static OrtValue* string_tensor(const char* const* texts, size_t count, const char* name) {
  OrtAllocator* allocator;
  check(api->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  const int64_t shape[1] = {(int64_t)count};
  OrtValue* value = NULL;
  check(api->CreateTensorAsOrtValue(allocator, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &value), name);
  if (count > 0) check(api->FillStringTensor(value, texts, count), name);
  return value;
}

static void usage(void) {
  die("usage: embed_c [--threads N] [--pad-side left|right] [--pad-id ID] (LIBRARY | --no-op-library) MODEL "
      "IDS_FILE, or embed_c [--threads N] --text [--extensions EXT_LIBRARY] [--prompt P] "
      "(LIBRARY | --no-op-library) TEXT_MODEL TEXTS_FILE");
}

static void print_embeddings(OrtValue* output, size_t batch, const char* model);

int main(int argc, char** argv) {
  long threads = 0, pad_id = 0; /* 0 threads: ORT's default */
  int left = 0, use_library = 1, strings_in = 0; /* strings_in: --text */
  const char *extensions = NULL, *prompt = NULL; /* --extensions, --prompt */
  const char* positional[3];
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--threads") == 0) { threads = parse_int(a, next, 1, INT_MAX); i++; }
    else if (strcmp(a, "--pad-id") == 0) { pad_id = parse_int(a, next, 0, LONG_MAX); i++; }
    else if (strcmp(a, "--pad-side") == 0) {
      if (next == NULL || (strcmp(next, "left") != 0 && strcmp(next, "right") != 0))
        die("--pad-side must be 'left' or 'right'");
      left = strcmp(next, "left") == 0;
      i++;
    } else if (strcmp(a, "--text") == 0) strings_in = 1;
    else if (strcmp(a, "--extensions") == 0) {
      if (next == NULL) die("--extensions needs the onnxruntime-extensions library");
      extensions = argv[++i];
    } else if (strcmp(a, "--prompt") == 0) {
      if (next == NULL) die("--prompt needs a value");
      prompt = argv[++i];
    } else if (strcmp(a, "--no-op-library") == 0) use_library = 0;
    else if (a[0] == '-' && a[1] == '-') usage();
    else if (npos < 3) positional[npos++] = a;
    else usage();
  }
  if (npos != 2 + use_library) usage();
  if (prompt != NULL && !strings_in) die("--prompt needs --text (a strings-in model)");
  if (extensions != NULL && !strings_in) die("--extensions needs --text (a strings-in model)");
  const char* library = use_library ? positional[0] : NULL;
  const char* model = positional[use_library];
  /* ORT would run a graph of any bitnet_onnx version with the library's ops: the version check is ours. */
  char model_error[1024];
  if (model_check_domain_version(model, BITNET_ONNX_DOMAIN, BITNET_ONNX_DOMAIN_VERSION_FIRST,
                                 BITNET_ONNX_DOMAIN_VERSION_LAST, model_error, sizeof model_error) != 0)
    die("%s", model_error);
  Texts texts = {NULL, NULL, 0};
  char** strings = NULL;
  size_t nstrings = 0;
  if (strings_in) strings = read_texts(positional[use_library + 1], &nstrings);
  else texts = read_ids(positional[use_library + 1]);

  /* The headers' API version must exist in the loaded runtime (a newer runtime serves older ones). */
  api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (api == NULL)
    die("onnxruntime %s does not provide API version %d (these headers need onnxruntime >= 1.%d)",
        OrtGetApiBase()->GetVersionString(), ORT_API_VERSION, ORT_API_VERSION);

  OrtEnv* env;
  /* FATAL only: every error comes back as an OrtStatus and is printed once, below. */
  check(api->CreateEnv(ORT_LOGGING_LEVEL_FATAL, "embed_c", &env), "CreateEnv");
  OrtSessionOptions* options;
  check(api->CreateSessionOptions(&options), "CreateSessionOptions");
  if (threads > 0) check(api->SetIntraOpNumThreads(options, (int)threads), "SetIntraOpNumThreads");
  /* ORT loads the library, calls its RegisterCustomOps and unloads it with the options. */
  if (library) check(api->RegisterCustomOpsLibrary_V2(options, library), "RegisterCustomOpsLibrary_V2 (op library)");
  if (extensions)
    check(api->RegisterCustomOpsLibrary_V2(options, extensions), "RegisterCustomOpsLibrary_V2 (extensions library)");
  OrtSession* session;
  check(api->CreateSession(env, model, options, &session), "CreateSession (model)");

  if (strings_in) { /* strings in: the graph tokenizes, truncates, pads and builds the mask */
    OrtValue* inputs[2] = {string_tensor((const char* const*)strings, nstrings, "text tensor"), NULL};
    const char* input_names[2] = {"text", "prompt"};
    if (prompt) inputs[1] = string_tensor(&prompt, 1, "prompt tensor");
    const char* output_names[1] = {"sentence_embedding"};
    OrtValue* output = NULL;
    check(api->Run(session, NULL, input_names, (const OrtValue* const*)inputs, prompt ? 2 : 1, output_names, 1,
                   &output), "Run");
    print_embeddings(output, nstrings, model);
    api->ReleaseValue(output);
    for (int k = 0; k < 2; k++)
      if (inputs[k]) api->ReleaseValue(inputs[k]);
    for (size_t r = 0; r < nstrings; r++) free(strings[r]);
    free(strings);
    api->ReleaseSession(session);
    api->ReleaseSessionOptions(options);
    api->ReleaseEnv(env);
    return 0;
  }

  /* input_ids and attention_mask, int64 [batch, width], padded to the longest text. */
  size_t batch = texts.rows, width = 0;
  for (size_t r = 0; r < batch; r++)
    if (texts.lengths[r] > width) width = texts.lengths[r];
  int64_t* ids = xrealloc(NULL, batch * width * sizeof *ids);
  int64_t* mask = xrealloc(NULL, batch * width * sizeof *mask);
  for (size_t r = 0; r < batch; r++) {
    size_t n = texts.lengths[r], first = left ? width - n : 0;
    for (size_t c = 0; c < width; c++) {
      int real = c >= first && c < first + n;
      ids[r * width + c] = real ? texts.ids[r][c - first] : pad_id;
      mask[r * width + c] = real;
    }
  }
  OrtMemoryInfo* cpu;
  check(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");
  const int64_t shape[2] = {(int64_t)batch, (int64_t)width};
  size_t bytes = batch * width * sizeof(int64_t);
  OrtValue* inputs[2] = {NULL, NULL};
  check(api->CreateTensorWithDataAsOrtValue(cpu, ids, bytes, shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                            &inputs[0]), "CreateTensorWithDataAsOrtValue (input_ids)");
  check(api->CreateTensorWithDataAsOrtValue(cpu, mask, bytes, shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                            &inputs[1]), "CreateTensorWithDataAsOrtValue (attention_mask)");

  const char* input_names[2] = {"input_ids", "attention_mask"};
  const char* output_names[1] = {"sentence_embedding"};
  OrtValue* output = NULL;
  check(api->Run(session, NULL, input_names, (const OrtValue* const*)inputs, 2, output_names, 1, &output),
        "Run");

  print_embeddings(output, batch, model);

  api->ReleaseValue(output);
  api->ReleaseValue(inputs[0]);
  api->ReleaseValue(inputs[1]);
  api->ReleaseMemoryInfo(cpu);
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(options);
  api->ReleaseEnv(env);
  free(ids);
  free(mask);
  for (size_t r = 0; r < batch; r++) free(texts.ids[r]);
  free(texts.ids);
  free(texts.lengths);
  return 0;
}

/* Prints sentence_embedding, one line per text: float32 [batch, dimension], or the int8 / uint8 values
 * of an export made with --output-precision (int8, uint8, binary, ubinary; the manifest's
 * "output_precision") as integers. */
static void print_embeddings(OrtValue* output, size_t batch, const char* model) {
  OrtTensorTypeAndShapeInfo* info;
  check(api->GetTensorTypeAndShape(output, &info), "GetTensorTypeAndShape (sentence_embedding)");
  ONNXTensorElementDataType type;
  check(api->GetTensorElementType(info, &type), "GetTensorElementType");
  size_t rank;
  check(api->GetDimensionsCount(info, &rank), "GetDimensionsCount");
  int64_t dims[2] = {0, 0};
  if (rank == 2) check(api->GetDimensions(info, dims, 2), "GetDimensions");
  api->ReleaseTensorTypeAndShapeInfo(info);
  int known = type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 ||
              type == ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  if (!known || rank != 2 || dims[0] != (int64_t)batch)
    die("%s: sentence_embedding is not float32, int8 or uint8 [%zu, width] (type %d, rank %zu)", model, batch,
        (int)type, rank);
  void* data;
  check(api->GetTensorMutableData(output, &data), "GetTensorMutableData (sentence_embedding)");
  for (int64_t r = 0; r < dims[0]; r++) {
    for (int64_t c = 0; c < dims[1]; c++) {
      int64_t i = r * dims[1] + c;
      if (c) putchar(' ');
      if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
        printf("%.9g", ((const float*)data)[i]);
      else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8)
        printf("%d", (int)((const int8_t*)data)[i]);
      else
        printf("%u", (unsigned)((const uint8_t*)data)[i]);
    }
    putchar('\n');
  }
  if (fflush(stdout) != 0) die("writing the embeddings failed (%s)", strerror(errno));
}
