// What the kernel test and benchmark programs of this folder share: their "--flag value" arguments,
// comma-list arguments (--kernels, --shapes, --m, ...) and the clock they time with.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "thread_clock.h"

namespace tool_support {

// A program's "--flag value" arguments over its defaults, which name every flag it takes: ok() is
// false (the unknown flag named on stderr) when the command line has another.
class Flags {
 public:
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults) : values_(std::move(defaults)) {
    for (int i = 1; i + 1 < argc && ok_; i += 2) {
      const auto it = values_.find(argv[i]);
      if (it == values_.end()) {
        std::fprintf(stderr, "unknown flag %s\n", argv[i]);
        ok_ = false;
      } else {
        it->second = argv[i + 1];
      }
    }
  }
  bool ok() const { return ok_; }
  const std::string& text(const std::string& flag) const { return values_.at(flag); }
  int integer(const std::string& flag) const { return std::atoi(text(flag).c_str()); }
  double real(const std::string& flag) const { return std::atof(text(flag).c_str()); }

 private:
  std::map<std::string, std::string> values_;
  bool ok_ = true;
};

// "a,b,,c" -> {"a", "b", "c"}: the items of a list argument, empty ones dropped.
inline std::vector<std::string> split(const std::string& text, char sep = ',') {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == sep) {
      if (i > start) items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  return items;
}

// The clock they time with: the calling thread's CPU time (kernels/thread_clock.h, the driver's trial clock too).
using bitnet_onnx::thread_cpu_seconds;

}  // namespace tool_support
