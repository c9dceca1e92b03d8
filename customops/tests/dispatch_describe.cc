// The library's dispatch description (kernels/dispatch_description.h) from the kernels alone, as the op
// library exports it (bitnet_onnx_dispatch): a tree built with a fake family or a fake ISA
// (tests/test_recipe_customops.py) shows what its description would list without an ORT build.
//   dispatch_describe [BITNET_ONNX_ISA value [BITNET_ONNX_KERNEL value [BITNET_ONNX_ATTENTION_PRECISION value]]]
#include <cstdio>

#include "dispatch_description.h"

int main(int argc, char** argv) {
  if (argc > 4) {
    std::fprintf(stderr, "usage: dispatch_describe [forced ISA [forced family [forced attention precision]]]\n");
    return 2;
  }
  const char* forced[3] = {nullptr, nullptr, nullptr};
  for (int i = 1; i < argc; ++i) forced[i - 1] = argv[i];
  std::fputs(bitnet_onnx::dispatch_description(forced[0], forced[1], forced[2]).c_str(), stdout);
  return 0;
}
