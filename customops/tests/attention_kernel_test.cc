// attention_kernel_test: the EncoderAttention kernels (customops/kernels/attention) against a
// float64 reference, without ONNX Runtime, for every tile-op path named on the command line:
// causal, bidirectional and sliding bands, GQA ratios 1/2/4/16, head dims 64/128/256,
// S = 1/7/128/513, left / right / full padding and a fully padded row. Jobs run forward and in
// reverse order must give the same bits (any thread split is identical). Built plain and with
// ASan/UBSan by tests/test_attention_kernels_native.py.
//
//   attention_kernel_test --paths scalar,avx2,avx512 [--max-work N]   (prints "<n> passed, <m> failed" last)
// --max-work skips cases whose reference costs more than N multiply-adds (sanitized builds).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention.h"

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

bool run(const TileOps& ops, const Problem& p, bool reverse) {
  const Plan plan = make_plan(p);
  for (int64_t i = 0; i < plan.jobs; ++i)
    if (!run_job(ops, plan, reverse ? plan.jobs - 1 - i : i)) return false;
  return true;
}

int passed = 0, failed = 0;

void check(const TileOps& ops, const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t nq = static_cast<size_t>(c.batch * c.seq * c.q_heads * c.head_dim);
  const size_t nkv = static_cast<size_t>(c.batch * c.seq * c.kv_heads * c.head_dim);
  // Exact-size buffers: ASan catches any read or write past them.
  std::vector<float> q(nq), k(nkv), v(nkv), out(nq, NAN), again(nq, NAN);
  for (float& x : q) x = 2.0f * normal(rng);  // wide enough for peaked softmax rows
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  const std::vector<int64_t> mask = make_mask(c);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Problem p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.mask = mask.data();
  p.out = out.data();
  p.batch = c.batch;
  p.seq = c.seq;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.scale = scale;
  p.before = c.before;
  p.after = c.after;
  char name[160];
  std::snprintf(name, sizeof name, "%s B=%lld S=%lld Hq=%lld Hkv=%lld D=%lld band=(%lld,%lld)", ops.name,
                (long long)c.batch, (long long)c.seq, (long long)c.q_heads, (long long)c.kv_heads,
                (long long)c.head_dim, (long long)c.before, (long long)c.after);
  const bool ok1 = run(ops, p, false);
  p.out = again.data();
  const bool ok2 = run(ops, p, true);
  const std::vector<double> ref = reference(c, q, k, v, mask, scale);
  double max_ref = 0.0, max_err = 0.0;
  for (size_t i = 0; i < nq; ++i) {
    max_ref = std::fmax(max_ref, std::fabs(ref[i]));
    max_err = std::fmax(max_err, std::fabs(out[i] - ref[i]));  // NaN (an unwritten output) fails below
  }
  const bool same = std::memcmp(out.data(), again.data(), nq * sizeof(float)) == 0;
  bool finite = true;
  for (float x : out) finite = finite && std::isfinite(x);
  const double rel = max_ref > 0 ? max_err / max_ref : max_err;
  if (ok1 && ok2 && same && finite && rel <= 1e-5) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL %s: rel err %.3g, order-independent %d, finite %d\n", name, rel, same, finite);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string paths = "scalar";
  double max_work = 1e300;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--paths") == 0) paths = argv[i + 1];
    if (std::strcmp(argv[i], "--max-work") == 0) max_work = std::atof(argv[i + 1]);
  }
  std::vector<const TileOps*> selected;
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t end = paths.find(',', start);
    const std::string name = paths.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? paths.size() + 1 : end + 1;
    const TileOps* ops = name == "scalar" ? scalar_tile_ops() : nullptr;
#if defined(__x86_64__)
    if (name == "avx2") ops = avx2_tile_ops();
    if (name == "avx512") ops = avx512_tile_ops();
#endif
    if (!ops) {
      std::printf("FAIL unknown path %s\n0 passed, 1 failed\n", name.c_str());
      return 1;
    }
    selected.push_back(ops);
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
  for (const TileOps* ops : selected) {
    const int before = failed;
    for (const Case& c : cases) check(*ops, c, rng);
    if (failed == before) std::printf("path %s: ok (%zu cases)\n", ops->name, cases.size());
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
