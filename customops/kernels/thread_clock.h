// The calling thread's CPU clock, shared by the driver's trials (i2s/driver.cc) and the kernel test and
// benchmark programs (customops/tests/tool_support.h). POSIX, as every target of this library.
#pragma once

#include <ctime>

namespace bitnet_onnx {

// CPU time of the calling thread in seconds: time the host gives other threads or processes while this
// one waits is not counted.
inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace bitnet_onnx
