// The library's dispatch description (kernels/dispatch_description.h) from the kernels alone, as the op
// library exports it (bitnet_onnx_dispatch): a tree built with a fake family or a fake ISA
// (tests/test_recipe_customops.py) shows what its description would list without an ORT build.
//   dispatch_describe [BITNET_ONNX_ISA [BITNET_ONNX_KERNEL [BITNET_ONNX_ATTENTION_PRECISION [M,K,N]]]]
// (each the variable's value; M,K,N: one call's shape, the family it runs)
#include <cstdio>

#include "dispatch_description.h"

int main(int argc, char** argv) {
  if (argc > 5) {
    std::fprintf(stderr, "usage: dispatch_describe [ISA [family [attention precision [M,K,N]]]]\n");
    return 2;
  }
  const char* given[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int i = 1; i < argc; ++i) given[i - 1] = argv[i];
  std::fputs(bitnet_onnx::dispatch_description(given[0], given[1], given[2], given[3]).c_str(), stdout);
  return 0;
}
