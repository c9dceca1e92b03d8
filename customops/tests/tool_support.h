// What the kernel test and benchmark programs of this folder share: their comma-list arguments
// (--kernels, --shapes, --m, ...) and the clock they time with.
#pragma once

#include <ctime>
#include <string>
#include <vector>

namespace tool_support {

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

// CPU time of the calling thread in seconds: on a shared machine, time other processes hold the core
// is not counted.
inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace tool_support
