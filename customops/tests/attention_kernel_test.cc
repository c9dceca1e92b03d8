// attention_kernel_test: the EncoderAttention kernels (customops/kernels/attention) against a
// float64 reference, without ONNX Runtime, for every tile-op path named on the command line:
// causal, bidirectional and sliding bands, GQA ratios 1/2/4/16, head dims 64/128/256,
// S = 1/7/128/513, left / right / full padding and a fully padded row. Jobs run forward and in
// reverse order must give the same bits (any thread split is identical). Built plain and with
// ASan/UBSan by tests/test_attention_kernels_native.py.
// Precision::kBf16 paths ("<path>:bf16" runs a TileOps path on bf16-rounded operands, "avx512bf16"
// the vdpbf16ps tile ops, "amxbf16" the AMX-BF16 ones): against the float64 reference on the bf16-rounded q*scale, k, v within
// 4e-3 (p's own rounding: 2^-9 relative each), and against the scalar bf16 reference within 2e-3.
// The latter is summation order only, but a score a few ulp off can move a p across a bf16 rounding
// boundary (2^-8 of that p), so it is one p's rounding step, not float32 noise; a wrong layout or
// rounding gives errors of order 1.
//
//   attention_kernel_test --paths scalar,avx2,avx512,scalar:bf16,avx512bf16 [--max-work N]
//   (prints "<n> passed, <m> failed" last)
// --max-work skips cases whose reference costs more than N multiply-adds (sanitized builds).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attention.h"
#include "cpu_features.h"

using namespace bitnet_onnx::attention;

namespace {

struct Case {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
  int64_t before, after;  // kUnbounded = none
};

// Row 0 full, row 1 left-padded, row 2 right-padded, row 3 (if any) fully padded.
std::vector<int64_t> make_mask(const Case& c) {
  std::vector<int64_t> mask(static_cast<size_t>(c.batch * c.seq), 1);
  for (int64_t b = 1; b < c.batch; ++b) {
    const int64_t pad = b == 3 ? c.seq : (c.seq * b) / 4;
    for (int64_t j = 0; j < pad; ++j) mask[b * c.seq + (b == 2 ? c.seq - 1 - j : j)] = 0;
  }
  return mask;
}

// softmax over allowed keys in float64; padded queries and rows without keys give 0.
std::vector<double> reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<int64_t>& mask, float scale) {
  const int64_t d = c.head_dim, g = c.q_heads / c.kv_heads, ldq = c.q_heads * d, ldkv = c.kv_heads * d;
  std::vector<double> out(q.size(), 0.0), s(static_cast<size_t>(c.seq));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t n = 0; n < c.q_heads; ++n)
      for (int64_t i = 0; i < c.seq; ++i) {
        if (mask[b * c.seq + i] == 0) continue;
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.seq; ++j) {
          const bool ok = mask[b * c.seq + j] != 0 && (c.before == kUnbounded || j >= i - c.before) &&
                          (c.after == kUnbounded || j <= i + c.after);
          s[j] = -INFINITY;
          if (!ok) continue;
          double dot = 0.0;
          for (int64_t x = 0; x < d; ++x)
            dot += static_cast<double>(q[(b * c.seq + i) * ldq + n * d + x] * scale) *
                   k[(b * c.seq + j) * ldkv + (n / g) * d + x];
          s[j] = dot;
          mx = dot > mx ? dot : mx;
        }
        if (mx == -INFINITY) continue;
        double sum = 0.0;
        for (int64_t j = 0; j < c.seq; ++j) sum += s[j] = std::exp(s[j] - mx);
        double* o = out.data() + (b * c.seq + i) * ldq + n * d;
        for (int64_t j = 0; j < c.seq; ++j)
          if (s[j] > 0.0)
            for (int64_t x = 0; x < d; ++x) o[x] += s[j] / sum * v[(b * c.seq + j) * ldkv + (n / g) * d + x];
      }
  return out;
}

// One path under test: a TileOps path at a precision, or the bf16 dot-product tile ops.
struct TestPath {
  std::string name;
  const TileOps* ops = nullptr;
  const Bf16TileOps* bf16 = nullptr;
  Precision precision = Precision::kF32;
};

bool run(const TestPath& path, Problem p, bool reverse) {
  p.precision = path.precision;
  const Plan plan = make_plan(p, path.bf16 != nullptr);
  for (int64_t i = 0; i < plan.jobs; ++i) {
    const int64_t job = reverse ? plan.jobs - 1 - i : i;
    if (!(path.bf16 ? run_job(*path.bf16, plan, job) : run_job(*path.ops, plan, job))) return false;
  }
  return true;
}

int passed = 0, failed = 0;

// One case's inputs and what every path is checked against: made once, shared by all paths (the
// float64 references cost more than the kernels, most of all under the sanitizers).
struct Prepared {
  Case c;
  std::vector<float> q, k, v;
  std::vector<int64_t> mask;
  float scale = 1.0f;
  std::vector<double> ref_f32, ref_bf16;  // the reference on the operands as given / bf16-rounded
  std::vector<float> scalar_bf16;         // the scalar bf16 path's output

  Prepared(const Case& cs, std::mt19937& rng) : c(cs), mask(make_mask(cs)) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    q.resize(static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim));
    k.resize(static_cast<size_t>(c.batch * c.seq * c.kv_heads * c.head_dim));
    v.resize(k.size());
    for (float& x : q) x = 2.0f * normal(rng);  // wide enough for peaked softmax rows
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  }

  Problem problem(float* out) const {
    Problem p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.mask = mask.data();
    p.out = out;
    p.batch = c.batch;
    p.seq = c.seq;
    p.q_heads = c.q_heads;
    p.kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.scale = scale;
    p.before = c.before;
    p.after = c.after;
    return p;
  }

  const std::vector<double>& reference_f32() {
    if (ref_f32.empty()) ref_f32 = reference(c, q, k, v, mask, scale);
    return ref_f32;
  }

  // the exact attention of the rounded operands (the scale folded into q first, as the op does)
  const std::vector<double>& reference_bf16() {
    if (ref_bf16.empty()) {
      std::vector<float> qr(q), kr(k), vr(v);
      for (float& x : qr) x = round_bf16(x * scale);
      for (float& x : kr) x = round_bf16(x);
      for (float& x : vr) x = round_bf16(x);
      ref_bf16 = reference(c, qr, kr, vr, mask, 1.0f);
    }
    return ref_bf16;
  }

  const std::vector<float>& scalar_bf16_out() {
    if (scalar_bf16.empty()) {
      scalar_bf16.assign(q.size(), NAN);
      run(TestPath{"scalar:bf16", scalar_tile_ops(), nullptr, Precision::kBf16}, problem(scalar_bf16.data()), false);
    }
    return scalar_bf16;
  }
};

struct PathResult {
  int failed = 0;
  double worst = 0.0, worst_scalar = 0.0;  // largest rel err to the reference / to scalar bf16
};

void check(const TestPath& path, Prepared& prep, PathResult& result) {
  const Case& c = prep.c;
  const size_t nq = prep.q.size();
  // Exact-size buffers: ASan catches any read or write past them.
  std::vector<float> out(nq, NAN), again(nq, NAN);
  char name[160];
  std::snprintf(name, sizeof name, "%s B=%lld S=%lld Hq=%lld Hkv=%lld D=%lld band=(%lld,%lld)", path.name.c_str(),
                (long long)c.batch, (long long)c.seq, (long long)c.q_heads, (long long)c.kv_heads,
                (long long)c.head_dim, (long long)c.before, (long long)c.after);
  const bool ok1 = run(path, prep.problem(out.data()), false);
  const bool ok2 = run(path, prep.problem(again.data()), true);
  const bool bf16 = path.precision == Precision::kBf16;
  auto rel_to = [&](const auto& want) {
    double max_ref = 0.0, max_err = 0.0;
    for (size_t i = 0; i < nq; ++i) {
      max_ref = std::fmax(max_ref, std::fabs(static_cast<double>(want[i])));
      max_err = std::fmax(max_err, std::fabs(out[i] - static_cast<double>(want[i])));  // NaN fails below
    }
    return max_ref > 0 ? max_err / max_ref : max_err;
  };
  const double rel = rel_to(bf16 ? prep.reference_bf16() : prep.reference_f32());
  // bf16: to the scalar bf16 reference (same roundings, other summation order)
  const double rel_scalar = bf16 ? rel_to(prep.scalar_bf16_out()) : 0.0;
  const bool same = std::memcmp(out.data(), again.data(), nq * sizeof(float)) == 0;
  bool finite = true;
  for (float x : out) finite = finite && std::isfinite(x);
  const bool close = bf16 ? rel <= 4e-3 && rel_scalar <= 2e-3 : rel <= 1e-5;
  result.worst = std::fmax(result.worst, rel);
  result.worst_scalar = std::fmax(result.worst_scalar, rel_scalar);
  if (ok1 && ok2 && same && finite && close) {
    ++passed;
  } else {
    ++failed;
    ++result.failed;
    std::printf("FAIL %s: rel err %.3g (to scalar %.3g), order-independent %d, finite %d\n", name, rel, rel_scalar,
                same, finite);
  }
}

// ---------------------------------------------------------------------------------------------
// The driver (attention::Attention): which path each ISA record runs per precision and head dim, the
// fallback's reason, the refusal under a forced ISA, and its calls against the tile ops run directly.

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// The path docs/attention.md names for a record at a precision on this CPU (written out here, apart from
// dispatch.cc's rule, so a change of the rule shows up).
std::string expected_path(const std::string& isa, Precision precision) {
  const auto& cpu = bitnet_onnx::cpu_features();
  const bool bf16 = precision == Precision::kBf16;
  if (isa == "amx" || isa == "avx512vnni") {
    if (bf16 && isa == "amx" && cpu.amxbf16) return "amxbf16";
    if (bf16 && cpu.avx512bf16) return "avx512bf16";
    return bf16 ? "avx512:bf16" : "avx512";
  }
  if (isa == "avxvnni" || isa == "avx2") return bf16 ? "avx2:bf16" : "avx2";
  return bf16 ? "scalar:bf16" : "scalar";
}

// The head-dim multiple of a path by name (the tile widths: 16 floats of AVX-512, 8 of AVX2, AMX's 32 bf16).
int64_t path_multiple(const std::string& name) {
  if (name.rfind("amxbf16", 0) == 0) return 32;
  if (name.rfind("avx512", 0) == 0) return 16;
  if (name.rfind("avx2", 0) == 0) return 8;
  return 1;
}

// Down the chain (bf16 dot products -> the record's float tiles -> scalar) to the first path taking d.
std::string expected_fallback_path(const std::string& isa, Precision precision, int64_t d) {
  const std::string own = expected_path(isa, precision), suffix = precision == Precision::kBf16 ? ":bf16" : "";
  if (d % path_multiple(own) == 0) return own;
  const std::string floats = expected_path(isa, Precision::kF32) + suffix;
  if (own.find(':') == std::string::npos && precision == Precision::kBf16 && d % path_multiple(floats) == 0)
    return floats;
  return "scalar" + suffix;
}

// A ParallelFor on two std::threads, jobs taken from a shared counter in any order.
void two_thread_pool(void*, void (*job)(void*, size_t), size_t count, void* arg) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) job(arg, i);
  };
  std::thread other(worker);
  worker();
  other.join();
}

void check_driver_paths() {
  const bitnet_onnx::IsaRecord* table = bitnet_onnx::isa_table();
  const auto& cpu = bitnet_onnx::cpu_features();
  for (int i = 0; i < bitnet_onnx::kIsaCount; ++i) {
    const bitnet_onnx::IsaRecord& record = table[i];
    if (!record.built || !record.available(cpu)) continue;
    for (Precision precision : {Precision::kF32, Precision::kBf16}) {
      const Attention driver(record.name, precision);
      for (int64_t d : {24, 48, 64, 128, 256}) {
        const PathChoice choice = driver.path_for(d);
        const std::string own = expected_path(record.name, precision);
        const std::string want = expected_fallback_path(record.name, precision, d);
        const std::string what = std::string("driver path ") + record.name + " " + precision_name(precision) +
                                 " D=" + std::to_string(d) + ": ran " + choice.path.name() + " (" + choice.fallback + ")";
        expect(choice.path.name() == want, what + ", want " + want);
        // A fallback says why, naming the path that did not run; the record's own path says nothing.
        const std::string reason = "head_dim " + std::to_string(d) + " is not a multiple of " +
                                   std::to_string(path_multiple(own)) + ", which " + own + " needs";
        expect(want == own ? choice.fallback.empty() : choice.fallback == reason, what + ", want reason '" + reason + "'");
      }
    }
  }
  std::string error;
  try {
    Attention("nonesuch", Precision::kF32);
    expect(false, "driver: BITNET_ONNX_ISA=nonesuch accepted");
  } catch (const std::invalid_argument& e) {
    expect(std::string(e.what()).find("BITNET_ONNX_ISA=nonesuch") == 0, std::string("driver: ") + e.what());
  }
}

// A forced ISA whose path does not take the head dim is refused by name; the same record unforced (the
// best this CPU runs) falls back and gives the bits of the fallback path run directly, on 1 or 2 threads.
void check_driver_calls(std::mt19937& rng) {
  const Case c{3, 70, 4, 2, 24, kUnbounded, 0};  // D = 24: no SIMD path takes it
  Prepared prep(c, rng);
  const bitnet_onnx::IsaRecord* best = bitnet_onnx::select_isa(nullptr, nullptr);
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    const std::string name = std::string("driver call ") + best->name + " " + precision_name(precision) + " D=24";
    std::vector<float> direct(prep.q.size(), NAN), one(prep.q.size(), NAN), two(prep.q.size(), NAN);
    run(TestPath{"scalar", scalar_tile_ops(), nullptr, precision}, prep.problem(direct.data()), false);
    const Attention unforced(nullptr, precision);
    unforced.run(prep.problem(one.data()), ParallelFor{});
    unforced.run(prep.problem(two.data()), ParallelFor{nullptr, two_thread_pool});
    const size_t bytes = direct.size() * sizeof(float);
    expect(std::memcmp(direct.data(), one.data(), bytes) == 0, name + ": unforced != the scalar tiles");
    expect(std::memcmp(one.data(), two.data(), bytes) == 0, name + ": 1 and 2 threads differ");
    if (std::string(best->name) == "scalar") continue;  // scalar takes every head dim: nothing to refuse
    const Attention forced(best->name, precision);
    try {
      forced.run(prep.problem(one.data()), ParallelFor{});
      expect(false, name + ": a forced ISA fell back");
    } catch (const std::invalid_argument& e) {
      const std::string want = std::string("BITNET_ONNX_ISA=") + best->name + ": " + forced.path_for(24).fallback +
                               "; a forced ISA does not fall back (to " + forced.path_for(24).path.name() + ")";
      expect(e.what() == want, name + ": refused with '" + e.what() + "', want '" + want + "'");
    }
  }
}

}  // namespace

// round_bf16's rule on the edge cases (the table of tests/test_attention_op.py::test_bf16_rounding_reference):
// ties to even, a carry into the exponent, overflow to inf, denormals to a signed zero, NaN quiet.
void check_rounding() {
  const uint32_t in[] = {0x3F808000, 0x3F818000, 0x3F808001, 0x3F7FFFFF, 0x7F7FFFFF, 0x00400000,
                         0x80000001, 0x7F800000, 0x7FC00001, 0x7F800001, 0xBF80C000};
  const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0x0000, 0x8000, 0x7F80, 0x7FC0, 0x7FC0, 0xBF81};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) {
    float x;
    std::memcpy(&x, &in[i], sizeof x);
    if (bf16_bits(x) == want[i]) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL bf16_bits(0x%08x) = 0x%04x, want 0x%04x\n", in[i], bf16_bits(x), want[i]);
    }
  }
}

int main(int argc, char** argv) {
  check_rounding();
  std::string paths = "scalar";
  double max_work = 1e300;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--paths") == 0) paths = argv[i + 1];
    if (std::strcmp(argv[i], "--max-work") == 0) max_work = std::atof(argv[i + 1]);
  }
  std::vector<TestPath> selected;
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t end = paths.find(',', start);
    const std::string name = paths.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? paths.size() + 1 : end + 1;
    TestPath path;
    path.name = name;
    const bool bf16 = name.size() > 5 && name.compare(name.size() - 5, 5, ":bf16") == 0;
    const std::string base = bf16 ? name.substr(0, name.size() - 5) : name;
    path.precision = bf16 ? Precision::kBf16 : Precision::kF32;
    path.ops = base == "scalar" ? scalar_tile_ops() : nullptr;
#if defined(__x86_64__)
    if (base == "avx2") path.ops = avx2_tile_ops();
    if (base == "avx512") path.ops = avx512_tile_ops();
    if (name == "avx512bf16") {
      path.bf16 = avx512bf16_tile_ops();
      path.precision = Precision::kBf16;
    }
    // AMX needs the OS's tile permission, which cpu_features() requests (Linux arch_prctl).
    if (name == "amxbf16" && bitnet_onnx::cpu_features().amxbf16) {
      path.bf16 = amxbf16_tile_ops();
      path.precision = Precision::kBf16;
    }
#endif
    if (!path.ops && !path.bf16) {
      std::printf("FAIL unknown path %s\n0 passed, 1 failed\n", name.c_str());
      return 1;
    }
    selected.push_back(path);
  }
  const int64_t U = kUnbounded;
  std::vector<Case> cases;
  // Bands: bidirectional, causal, sliding narrower than S, sliding wider than S, causal sliding.
  const int64_t bands[][2] = {{U, U}, {U, 0}, {5, 5}, {600, 600}, {70, 0}};
  const int64_t groups[][2] = {{4, 4}, {4, 2}, {4, 1}, {16, 1}};
  const int64_t dims[] = {64, 128, 256};
  const int64_t seqs[] = {1, 7, 128, 513};
  int n = 0;
  for (int64_t s : seqs)
    for (const auto& band : bands)
      for (const auto& hg : groups)
        for (int64_t d : dims) {
          // Long sequences at every band but a rotating subset of (group, dim), to keep the run short.
          if (s >= 128 && (n++ % 4) != 0) continue;
          if (4.0 * hg[0] * s * s * d > max_work) continue;
          cases.push_back({4, s, hg[0], hg[1], d, band[0], band[1]});
        }
  std::mt19937 rng(1234);
  check_driver_paths();
  check_driver_calls(rng);
  std::vector<PathResult> results(selected.size());
  for (const Case& c : cases) {  // case by case: its inputs and references serve every path
    Prepared prep(c, rng);
    for (size_t i = 0; i < selected.size(); ++i) check(selected[i], prep, results[i]);
  }
  for (size_t i = 0; i < selected.size(); ++i)
    if (results[i].failed == 0)
      std::printf("path %s: ok (%zu cases; worst rel err %.2g, to scalar bf16 %.2g)\n", selected[i].name.c_str(),
                  cases.size(), results[i].worst, results[i].worst_scalar);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
