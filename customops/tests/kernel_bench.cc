// Kernel-level timing of the pure kernels (no ONNX Runtime): quantize + dot_scaled of one
// [M x K] x [N x K] product on one thread, per kernel, the kernels interleaved within each
// repetition so that machine drift hits all alike. For iterating on kernels; the numbers that go
// into BENCHMARKS.md come from benchmarks/bench_op.py (through ORT, with ORT's baselines).
//
//   kernel_bench --kernels avx2,avx512vnni,lut-avx2,lut-avx512 --shapes 1024x2048,640x256 --m 1,16,512 [--reps 7]
//
// Names: any family's kernels (kernels/i2s/families.h): the multiply kernels' (ISA names), the
// lookup family's (lut-avx2, lut-avx512, ...), the direct multiply path's (mul_direct-avx512vnni, ...).
// Prints one line per (shape, M, kernel): median microseconds and GOP/s (2*M*K*N per call).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_features.h"
#include "driver.h"
#include "isa.h"
#include "i2s_bench_support.h"
#include "tool_support.h"

namespace {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;
using bitnet_onnx::i2s::QuantizeFn;
using tool_support::split;
using tool_support::thread_cpu_seconds;

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};

struct Case {
  const I2SKernel* kern;
  QuantizeFn quantize;  // the ISA's (the driver's, whichever family)
  std::unique_ptr<uint8_t, FreeBytes> packed;
  std::vector<double> times;
};

// One call as the op makes it on one thread: quantize every row, then dot_scaled over the
// kernel's tile grid (n tiles outer, as the op's dot_job orders them).
void run_once(const I2SKernel& kern, QuantizeFn quantize, const uint8_t* packed, int64_t m, int64_t n, int64_t k,
              const float* x, int8_t* q, float* a, int32_t* qsum, float* y) {
  quantize(x, m, k, nullptr, 1e-6f, q, a, qsum);
  i2s_bench::dot_grid(kern, packed, n, k, QuantizedRows{q, a, qsum, m, k}, y);
}

}  // namespace

int main(int argc, char** argv) {
  const tool_support::Flags flags(argc, argv, {{"--kernels", "scalar"}, {"--shapes", "1024x2048"},
                                               {"--m", "1,16,128,512"}, {"--reps", "7"}, {"--min-seconds", "0.02"}});
  if (!flags.ok()) return 2;
  const std::string kernels = flags.text("--kernels"), shapes = flags.text("--shapes"), ms = flags.text("--m");
  const int reps = flags.integer("--reps");
  const double min_seconds = flags.real("--min-seconds");  // per timed sample: repeat the call until this much time passed
  std::mt19937 rng(0);
  for (const std::string& shape : split(shapes, ',')) {
    int64_t k, n;
    if (!i2s_bench::parse_shape(shape, &k, &n)) return 2;
    const std::vector<uint8_t> i2s = i2s_bench::random_codes(n, k, rng);
    for (const std::string& mstr : split(ms, ',')) {
      const int64_t m = std::atoll(mstr.c_str());
      std::vector<float> x(static_cast<size_t>(m * k));
      std::normal_distribution<float> normal;
      for (auto& v : x) v = normal(rng);
      i2s_bench::AlignedVector<int8_t> q(static_cast<size_t>(m * k));  // as ORT allocates the op's tensors
      i2s_bench::AlignedVector<float> y(static_cast<size_t>(m * n));
      std::vector<float> a(static_cast<size_t>(m));
      std::vector<int32_t> qsum(static_cast<size_t>(m));
      std::vector<Case> cases;
      for (const std::string& name : split(kernels, ',')) {
        std::string err;
        bitnet_onnx::Isa isa;
        bitnet_onnx::i2s::Family family;
        const I2SKernel* kern = bitnet_onnx::i2s::kernel_named(name.c_str(), &isa, &family, &err);
        if (!kern) {
          std::fprintf(stderr, "%s\n", err.c_str());
          return 1;
        }
        Case c;
        c.kern = kern;
        c.quantize = bitnet_onnx::i2s::quantizer(isa);
        c.packed.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (kern->packed_bytes(n, k) + 63) / 64 * 64)));
        kern->repack(i2s.data(), n, k, c.packed.get());
        cases.push_back(std::move(c));
      }
      // Calls per sample, from one probe call of the first kernel.
      double t0 = thread_cpu_seconds();
      run_once(*cases[0].kern, cases[0].quantize, cases[0].packed.get(), m, n, k, x.data(), q.data(), a.data(),
               qsum.data(), y.data());
      const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(min_seconds / std::max(thread_cpu_seconds() - t0, 1e-7)));
      for (int r = 0; r < reps; ++r)
        for (Case& c : cases) {
          run_once(*c.kern, c.quantize, c.packed.get(), m, n, k, x.data(), q.data(), a.data(), qsum.data(), y.data());
          t0 = thread_cpu_seconds();
          for (int64_t i = 0; i < calls; ++i)
            run_once(*c.kern, c.quantize, c.packed.get(), m, n, k, x.data(), q.data(), a.data(), qsum.data(), y.data());
          c.times.push_back((thread_cpu_seconds() - t0) / calls);
        }
      for (Case& c : cases) {
        std::sort(c.times.begin(), c.times.end());
        const double t = c.times[c.times.size() / 2];
        std::printf("K=%-5" PRId64 " N=%-5" PRId64 " M=%-5" PRId64 " %-11s %10.2f us %8.1f GOP/s\n", k, n, m,
                    c.kern->name, t * 1e6, 2.0 * m * k * n / t / 1e9);
      }
    }
  }
  return 0;
}
