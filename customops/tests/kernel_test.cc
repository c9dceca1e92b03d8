// Checks I2SKernel implementations (no ONNX Runtime) against reference vectors written by
// tests/kernel_vectors/make_kernel_vectors.py (numpy: bitnet_onnx.ternary).
//
//   kernel_test --kernels scalar,avx2,... [--extreme-k K,K,...] [FILE.i2sv...]
//   kernel_test --list-kernels   (the ISA table, kernels/isa.h, as the op library exports it)
//   kernel_test --kernels lut-scalar,lut-avx2,... --generated small|full [FILE.i2sv...]
//   kernel_test --kernels ... --threads 1,2 [--driver-once-above MACS] FILE.i2sv...
//   kernel_test --kernels ... --extreme-k K,... [--extreme-whole-tile KERNEL,...]
//
// Kernel names are any family's (kernels/i2s/families.h): the multiply kernels' (the ISA names) or
// another family's own names (kernels/i2s/lut/: lut-scalar, lut-avx2, lut-avx512, lut-neon; each
// must be that family's kernel of an ISA this CPU runs). --generated adds cases built in memory for the lookup kernels' edges
// (token-block and row tails, K-block tails, int16 widening, extremes, zero rows) with sums from
// a plain loop over the I2_S bytes: every M of {1, 15, 16, 17, 31, 32, 33, 513, 2048} x K of
// {128 .. 3072}, the two models' projection shapes at M = 1, 17, 33, all-127 / all -128 activations against all
// +1 / all -1 weights; "small" is the subset sanitized and emulated runs can afford.
//
// --extreme-k builds its cases in memory (files that large would take gigabytes): for each K,
// 128-periodic rows of q at the int8 extremes against 128-periodic ternary rows, so that the
// exact sums, (K / 128) times one block's, reach +-128 * K (the int32 limit just below K = 2^24).
// --extreme-whole-tile: the named kernels run those cases as the one all-token tile (dot, dot_scaled)
// only, for kernels whose sums of a token do not depend on how many tokens a call holds (see check_extreme).
// --threads runs, for every file, the driver (kernels/i2s/driver.h: quantization with the fused
// norm, the op's job grid over that many threads, the epilogue) on the kernel's ISA forced to its
// family, and compares y bit for bit with the op's epilogue of the file's exact sums, where the file's
// dot input is the driver's own quantized rows (make_kernel_vectors.py), else with the driver on the
// scalar multiply kernel on one thread. --driver-once-above MACS: files of more multiply-adds (one
// full dot) run the driver at the last --threads count only (its job grid does not depend on the count).
// For every named kernel and every file: repack + dot over the whole [M x N], over odd sub-tiles
// (with a padded leading dimension whose padding must stay untouched) and over the kernel's own
// tile grid == the reference int32 sums; quantize without and with the norm weight == the
// reference q and qsum exactly and a bitwise (NaN for NaN). A kernel name that select_kernel
// refuses (unknown, or the CPU lacks it) is a failure, never a skip. Buffers are sized exactly,
// so AddressSanitizer sees any read or write past them. Last line: "N passed, N failed".
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cpu_features.h"
#include "driver.h"
#include "isa.h"
#include "measured_choice.h"
#include "tool_support.h"

using tool_support::split;

namespace {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;

struct Vectors {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  float eps = 0;
  bool has_norm = false;
  std::vector<float> x, norm_w;
  std::vector<uint8_t> i2s;
  std::vector<int8_t> q_plain, q_norm, q_dot;
  std::vector<float> a_plain, a_norm;
  std::vector<int32_t> qsum_plain, qsum_norm, qsum_dot, sums;
};

class Reader {
 public:
  Reader(const std::vector<char>& data) : data_(data) {}
  template <class T>
  bool read(T* dst, size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > data_.size() - pos_) return false;
    std::memcpy(dst, data_.data() + pos_, bytes);
    pos_ += bytes;
    return true;
  }
  template <class T>
  bool read(std::vector<T>* dst, int64_t count) {
    dst->resize(static_cast<size_t>(count));
    return read(dst->data(), dst->size());
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  const std::vector<char>& data_;
  size_t pos_ = 0;
};

bool load(const char* path, Vectors* v, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return *error = "cannot open", false;
  const std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Reader r(data);
  char magic[8];
  int64_t dims[3];
  uint32_t flags = 0;
  if (!r.read(magic, 8) || std::memcmp(magic, "I2SKV001", 8) != 0) return *error = "bad magic", false;
  if (!r.read(dims, 3) || !r.read(&v->eps, 1) || !r.read(&flags, 1)) return *error = "short header", false;
  v->m = dims[0], v->n = dims[1], v->k = dims[2];
  v->has_norm = flags & 1;
  const int64_t m = v->m, n = v->n, k = v->k;
  if (m < 1 || n < 1 || k < 128 || k % 128 != 0 || m > (1 << 20) || n > (1 << 20) || k > (1 << 20))
    return *error = "bad shape", false;
  bool ok = r.read(&v->x, m * k);
  if (v->has_norm) ok = ok && r.read(&v->norm_w, k);
  ok = ok && r.read(&v->i2s, n * k / 4) && r.read(&v->q_plain, m * k) && r.read(&v->a_plain, m) &&
       r.read(&v->qsum_plain, m);
  if (v->has_norm) ok = ok && r.read(&v->q_norm, m * k) && r.read(&v->a_norm, m) && r.read(&v->qsum_norm, m);
  ok = ok && r.read(&v->q_dot, m * k) && r.read(&v->qsum_dot, m) && r.read(&v->sums, m * n);
  if (!ok || !r.at_end()) return *error = "file size does not match its header", false;
  return true;
}

// Exactly `count` elements (a sanitizer flags any access past the end) at an address that is
// `offset` bytes past a 64-byte boundary. Kernel inputs get only their natural alignment
// (offset = sizeof(T)): ORT hands over numpy buffers and the op allocates q with new[]. Only the
// repacked weights are 64-byte aligned, as the op allocates them.
template <class T>
class Buffer {
 public:
  Buffer(size_t count, size_t offset) : count_(count) {
    if (posix_memalign(&base_, 64, offset + count * sizeof(T)) != 0) std::abort();
    ptr_ = reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }
  Buffer(const std::vector<T>& from, size_t offset) : Buffer(from.size(), offset) {
    std::memcpy(ptr_, from.data(), from.size() * sizeof(T));
  }
  ~Buffer() { std::free(base_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return ptr_; }
  T& operator[](size_t i) const { return ptr_[i]; }
  size_t size() const { return count_; }

 private:
  void* base_ = nullptr;
  T* ptr_ = nullptr;
  size_t count_;
};

// Natural alignment only (see Buffer).
template <class T>
Buffer<T>* unaligned_copy(const std::vector<T>& v) { return new Buffer<T>(v, sizeof(T)); }

int g_passed = 0, g_failed = 0;

void report(bool ok, const std::string& what, const std::string& detail) {
  (ok ? g_passed : g_failed) += 1;
  if (!ok) std::printf("FAIL %s: %s\n", what.c_str(), detail.c_str());
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

constexpr int32_t kSentinel = 0x5a5a5a5a;

// dot over [m0,m1) x [n0,n1) into a buffer with ld = width + pad; "" when it equals the reference.
std::string check_tile(const I2SKernel& kern, const uint8_t* packed, const Vectors& v, const QuantizedRows& rows,
                       int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t pad) {
  const int64_t ld = (n1 - n0) + pad;
  Buffer<int32_t> out(static_cast<size_t>((m1 - m0) * ld), sizeof(int32_t));
  std::fill(out.get(), out.get() + out.size(), kSentinel);
  kern.dot(packed, v.n, v.k, rows, m0, m1, n0, n1, out.get(), ld);
  for (int64_t i = m0; i < m1; ++i) {
    for (int64_t j = n0; j < n1; ++j) {
      const int32_t got = out[(i - m0) * ld + (j - n0)], want = v.sums[i * v.n + j];
      if (got != want)
        return fmt("tile m[%" PRId64 ",%" PRId64 ") n[%" PRId64 ",%" PRId64 "): sum[%" PRId64 ",%" PRId64
                   "] = %d, want %d",
                   m0, m1, n0, n1, i, j, got, want);
    }
    for (int64_t j = n1 - n0; j < ld; ++j)
      if (out[(i - m0) * ld + j] != kSentinel)
        return fmt("tile m[%" PRId64 ",%" PRId64 ") n[%" PRId64 ",%" PRId64 "): wrote into the ld padding",
                   m0, m1, n0, n1);
  }
  return "";
}

uint64_t g_lcg = 0x9e3779b97f4a7c15ull;
int64_t rand_below(int64_t bound) {
  g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<int64_t>((g_lcg >> 33) % static_cast<uint64_t>(bound));
}

bool same_float(float got, float want) {
  if (std::isnan(want)) return std::isnan(got);
  uint32_t g, w;
  std::memcpy(&g, &got, 4);
  std::memcpy(&w, &want, 4);
  return g == w;
}

// dot_scaled over [m0,m1) x [n0,n1) with ld = width + pad must equal the op's epilogue applied
// to the reference sums, (float(sum) / a) * s_w, bit for bit.
std::string check_scaled_tile(const I2SKernel& kern, const uint8_t* packed, const Vectors& v,
                              const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                              int64_t pad) {
  const float s_w = 0.0123f;
  const int64_t ld = (n1 - n0) + pad;
  Buffer<float> y(static_cast<size_t>((m1 - m0) * ld), sizeof(float));
  std::fill(y.get(), y.get() + y.size(), -7.0f);
  kern.dot_scaled(packed, v.n, v.k, rows, s_w, m0, m1, n0, n1, y.get(), ld);
  for (int64_t i = m0; i < m1; ++i) {
    for (int64_t j = n0; j < n1; ++j) {
      const float got = y[(i - m0) * ld + (j - n0)];
      const float want = (static_cast<float>(v.sums[i * v.n + j]) / rows.a[i]) * s_w;
      if (!same_float(got, want))
        return fmt("tile m[%" PRId64 ",%" PRId64 ") n[%" PRId64 ",%" PRId64 "): y[%" PRId64 ",%" PRId64
                   "] = %.9g, want %.9g", m0, m1, n0, n1, i, j, got, want);
    }
    for (int64_t j = n1 - n0; j < ld; ++j)
      if (y[(i - m0) * ld + j] != -7.0f)
        return fmt("tile m[%" PRId64 ",%" PRId64 ") n[%" PRId64 ",%" PRId64 "): wrote into the ld padding",
                   m0, m1, n0, n1);
  }
  return "";
}

void check_dot(const I2SKernel& kern, const Vectors& v, const std::string& tag) {
  std::unique_ptr<Buffer<uint8_t>> i2s(unaligned_copy(v.i2s));
  Buffer<uint8_t> packed(kern.packed_bytes(v.n, v.k), 0);
  kern.repack(i2s->get(), v.n, v.k, packed.get());
  report(std::memcmp(i2s->get(), v.i2s.data(), v.i2s.size()) == 0, tag + " repack", "modified its input");

  std::unique_ptr<Buffer<int8_t>> q(unaligned_copy(v.q_dot));
  std::unique_ptr<Buffer<float>> a(unaligned_copy(v.a_plain));
  std::unique_ptr<Buffer<int32_t>> qsum(unaligned_copy(v.qsum_dot));
  const QuantizedRows rows{q->get(), a->get(), qsum->get(), v.m, v.k};
  const int64_t m = v.m, n = v.n;

  std::string err = check_tile(kern, packed.get(), v, rows, 0, m, 0, n, 0);
  report(err.empty(), tag + " dot full", err);

  // Odd sub-tiles: fixed corners and random ones; padded leading dimension.
  std::vector<std::array<int64_t, 4>> tiles = {
      {m - 1, m, n - 1, n}, {0, 1, 0, n}, {0, m, n - 1, n}, {m / 3, m - m / 5, n / 7, n - n / 3}};
  for (int i = 0; i < 6; ++i) {
    const int64_t m0 = rand_below(m), n0 = rand_below(n);
    tiles.push_back({m0, m0 + 1 + rand_below(m - m0), n0, n0 + 1 + rand_below(n - n0)});
  }
  err.clear();
  for (const auto& t : tiles) {
    err = check_tile(kern, packed.get(), v, rows, t[0], t[1], t[2], t[3], 3);
    if (!err.empty()) break;
  }
  report(err.empty(), tag + " dot sub-tiles", err);

  if (kern.dot_scaled) {
    err = check_scaled_tile(kern, packed.get(), v, rows, 0, m, 0, n, 0);
    for (size_t i = 0; i < tiles.size() && err.empty(); ++i)
      err = check_scaled_tile(kern, packed.get(), v, rows, tiles[i][0], tiles[i][1], tiles[i][2], tiles[i][3], 3);
    report(err.empty(), tag + " dot_scaled", err);
  }

  // The op's split: the kernel's own tile grid, each tile written where the op would write it.
  Buffer<int32_t> out(static_cast<size_t>(m * n), sizeof(int32_t));
  std::fill(out.get(), out.get() + out.size(), kSentinel);
  for (int64_t m0 = 0; m0 < m; m0 += kern.tile_m)
    for (int64_t n0 = 0; n0 < n; n0 += kern.tile_n)
      kern.dot(packed.get(), n, v.k, rows, m0, std::min(m, m0 + kern.tile_m), n0, std::min(n, n0 + kern.tile_n),
               out.get() + m0 * n + n0, n);
  int64_t bad = -1;
  for (int64_t i = 0; i < m * n && bad < 0; ++i)
    if (out[i] != v.sums[i]) bad = i;
  report(bad < 0, tag + fmt(" dot tile grid %" PRId64 "x%" PRId64, kern.tile_m, kern.tile_n),
         bad < 0 ? "" : fmt("sum[%" PRId64 ",%" PRId64 "] = %d, want %d", bad / n, bad % n, out[bad], v.sums[bad]));
}


// ---- --generated (lookup-family edges)

enum class Fill { kRandom, kMax, kMin, kZeroRows };

// I2_S bytes of ternary rows t [n, k] (code = t + 1).
std::vector<uint8_t> i2s_of(const std::vector<int8_t>& t, int64_t n, int64_t k) {
  std::vector<uint8_t> out(static_cast<size_t>(n * k / 4), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) {
      const int64_t b = c / 128, p = c % 128;
      out[j * (k / 4) + b * 32 + p % 32] |= static_cast<uint8_t>((t[j * k + c] + 1) << (6 - 2 * (p / 32)));
    }
  return out;
}

// One in-memory case: q, a (every 7th token NaN, as a non-finite row quantizes), qsum, the I2_S
// bytes and the exact sums from a plain loop. kMax / kMin: every activation 127 / -128 against
// rows of all +1, all -1 and alternating weights (the largest |sums| and int16 partials);
// kZeroRows: every other token and every third weight row zero.
Vectors make_generated(int64_t m, int64_t k, int64_t n, Fill fill) {
  Vectors v;
  v.m = m, v.k = k, v.n = n;
  v.name = fmt("generated m%" PRId64 " k%" PRId64 " n%" PRId64 " fill%d", m, k, n, static_cast<int>(fill));
  std::vector<int8_t> t(static_cast<size_t>(n * k));
  v.q_dot.resize(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) {
      int8_t w = static_cast<int8_t>(rand_below(3) - 1);
      if (fill == Fill::kMax || fill == Fill::kMin) w = j % 3 == 0 ? 1 : j % 3 == 1 ? -1 : (c % 2 ? 1 : -1);
      if (fill == Fill::kZeroRows && j % 3 == 1) w = 0;
      t[j * k + c] = w;
    }
  for (int64_t i = 0; i < m * k; ++i) {
    int8_t q = static_cast<int8_t>(rand_below(256) - 128);
    if (fill == Fill::kMax) q = 127;
    if (fill == Fill::kMin) q = -128;
    if (fill == Fill::kZeroRows && (i / k) % 2 == 0) q = 0;
    v.q_dot[i] = q;
  }
  v.i2s = i2s_of(t, n, k);
  v.a_plain.resize(static_cast<size_t>(m));
  v.qsum_dot.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    v.a_plain[i] = i % 7 == 6 ? std::nanf("") : 0.25f + static_cast<float>(rand_below(4000)) / 64.0f;
    int32_t s = 0;
    for (int64_t c = 0; c < k; ++c) s += v.q_dot[i * k + c];
    v.qsum_dot[i] = s;
  }
  v.sums.assign(static_cast<size_t>(m * n), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t c = 0; c < k; ++c) s += int64_t{v.q_dot[i * k + c]} * t[j * k + c];
      v.sums[i * n + j] = static_cast<int32_t>(s);
    }
  return v;
}

// (m, k, n, fill) of --generated: "full" natively, "small" (<= ~10 M MACs each) for sanitized
// and emulated builds.
std::vector<std::array<int64_t, 4>> generated_cases(bool full) {
  std::vector<std::array<int64_t, 4>> out;
  const int64_t ms[] = {1, 15, 16, 17, 31, 32, 33, 513, 2048};
  const int64_t ks[] = {128, 640, 1024, 2048, 3072};
  for (int64_t m : ms)
    for (int64_t k : ks) {
      const int64_t n = m >= 513 ? 9 : 37;  // rows: not a multiple of 4 (sweep) nor 16 (epilogue)
      if (full || m * k * n <= 3'000'000) out.push_back({m, k, n, static_cast<int64_t>(Fill::kRandom)});
    }
  // The projections of Qwen3-0.6B (K x N: 1024 x 2048 / 1024 / 3072, 2048 x 1024, 3072 x 1024) and
  // Gemma3-270M (640 x 1024 / 256 / 2048, 1024 x 640, 2048 x 640): 1, 17 and 33 tokens (one, an
  // odd count past a 16-token tile, past two); "small" has the ones up to 700 K weights at 33.
  const int64_t shapes[][2] = {{1024, 2048}, {1024, 1024}, {2048, 1024}, {1024, 3072}, {3072, 1024},
                               {640, 1024},  {640, 256},   {1024, 640},  {640, 2048},  {2048, 640}};
  for (const auto& kn : shapes)
    for (int64_t m : {1, 17, 33})
      if (full || (m == 33 && kn[0] * kn[1] <= 700'000)) out.push_back({m, kn[0], kn[1], static_cast<int64_t>(Fill::kRandom)});
  for (Fill fill : {Fill::kMax, Fill::kMin, Fill::kZeroRows})
    for (int64_t k : {int64_t{128}, int64_t{3072}, int64_t{8192}})
      if (full || k <= 3072) out.push_back({40, k, 6, static_cast<int64_t>(fill)});
  return out;
}

// ---- --extreme-k

// Column c (mod 128) of q row pattern p: the int8 extremes, constant, alternating, or split by
// the panel layout's code field (c % 16 / 4 == 3 is the field the one-token path scales by 64).
int8_t extreme_q(int p, int64_t c) {
  const bool odd = c % 2 == 1, top_field = c % 16 >= 12;
  switch (p % 8) {
    case 0: return 127;
    case 1: return -128;
    case 2: return odd ? -128 : 127;
    case 3: return odd ? 127 : -128;
    case 4: return top_field ? -128 : 127;
    case 5: return top_field ? 127 : -128;
    case 6: return -127;
    default: return 0;
  }
}

// Column c (mod 128) of ternary row pattern p: all +1, all -1, alternating, the top code field
// against the rest, and the I2_S byte's 32-column fields alternating.
int8_t extreme_t(int p, int64_t c) {
  switch (p) {
    case 0: return 1;
    case 1: return -1;
    case 2: return c % 2 == 1 ? -1 : 1;
    case 3: return c % 16 >= 12 ? 1 : -1;
    default: return (c / 32) % 2 == 1 ? 1 : -1;
  }
}

struct ExtremeCase {
  static constexpr int64_t m = 16, n = 5;  // 16 tokens: the buffered path of every x86 kernel
  int64_t k = 0;
  std::vector<int8_t> q;
  std::vector<int32_t> qsum;
  std::vector<float> a;
  std::vector<uint8_t> i2s;
  std::vector<int32_t> sums;
};

// "" on success; the reason when the sums of this K do not fit int32 (no kernel could be exact).
// Every row is one 128-column block repeated: q's block, and W's 32 I2_S bytes.
std::string make_extreme(int64_t k, ExtremeCase* e) {
  e->k = k;
  const int64_t blocks = k / 128;
  int8_t q_block[16][128], t_block[5][128];
  for (int64_t c = 0; c < 128; ++c) {
    for (int64_t i = 0; i < e->m; ++i) q_block[i][c] = extreme_q(static_cast<int>(i < 8 ? i : 15 - i), c);
    for (int64_t j = 0; j < e->n; ++j) t_block[j][c] = extreme_t(static_cast<int>(j), c);
  }
  e->q.resize(static_cast<size_t>(e->m * k));
  e->qsum.resize(static_cast<size_t>(e->m));
  e->a.assign(static_cast<size_t>(e->m), 1.0f);
  for (int64_t i = 0; i < e->m; ++i) {
    int64_t block_sum = 0;
    for (int64_t c = 0; c < 128; ++c) block_sum += q_block[i][c];
    for (int64_t b = 0; b < blocks; ++b) std::memcpy(&e->q[i * k + b * 128], q_block[i], 128);
    e->qsum[i] = static_cast<int32_t>(block_sum * blocks);
  }
  e->i2s.resize(static_cast<size_t>(e->n * k / 4));
  for (int64_t j = 0; j < e->n; ++j) {
    uint8_t bytes[32] = {};  // byte p holds columns p, p+32, p+64, p+96 in bits 7-6 .. 1-0
    for (int64_t c = 0; c < 128; ++c)
      bytes[c % 32] |= static_cast<uint8_t>((t_block[j][c] + 1) << (6 - 2 * (c / 32)));  // -1,0,+1 -> 0b00,01,10
    for (int64_t b = 0; b < blocks; ++b) std::memcpy(&e->i2s[j * (k / 4) + b * 32], bytes, 32);
  }
  e->sums.resize(static_cast<size_t>(e->m * e->n));
  for (int64_t i = 0; i < e->m; ++i)
    for (int64_t j = 0; j < e->n; ++j) {
      int64_t block = 0;
      for (int64_t c = 0; c < 128; ++c) block += int64_t{q_block[i][c]} * t_block[j][c];
      const int64_t sum = block * blocks;
      if (sum > INT32_MAX || sum < INT32_MIN) return fmt("sum %" PRId64 " does not fit int32", sum);
      e->sums[i * e->n + j] = static_cast<int32_t>(sum);
    }
  return "";
}

// "" when dot over rows [m0, m1) x all columns gives the closed-form sums.
std::string check_extreme_tile(const I2SKernel& kern, const uint8_t* packed, const ExtremeCase& e,
                               const QuantizedRows& rows, int64_t m0, int64_t m1) {
  std::vector<int32_t> out(static_cast<size_t>((m1 - m0) * e.n), kSentinel);
  kern.dot(packed, e.n, e.k, rows, m0, m1, 0, e.n, out.data(), e.n);
  for (int64_t i = m0; i < m1; ++i)
    for (int64_t j = 0; j < e.n; ++j)
      if (out[(i - m0) * e.n + j] != e.sums[i * e.n + j])
        return fmt("rows [%" PRId64 ",%" PRId64 "): sum[%" PRId64 ",%" PRId64 "] = %d, want %d", m0, m1, i, j,
                   out[(i - m0) * e.n + j], e.sums[i * e.n + j]);
  return "";
}

// All tokens (the buffered path), each token alone (the one-token path up to K = 2^19, then the
// direct one) and three (the direct path), by dot and by dot_scaled (bit for bit against the
// epilogue of the exact sums). whole_tile: the all-token tile only, which holds every row pattern at
// the same K, for a kernel whose sums of one token do not depend on how many tokens the call has (the
// lookup kernels: one int16 lane per token throughout, lut_tables.h; only the gather and the epilogue
// see the count, and the --generated and file cases check those at every token count of a block).
void check_extreme(const I2SKernel& kern, const ExtremeCase& e, const std::string& tag, bool whole_tile) {
  std::unique_ptr<uint8_t, decltype(&std::free)> packed(
      static_cast<uint8_t*>(std::aligned_alloc(64, (kern.packed_bytes(e.n, e.k) + 63) / 64 * 64)), std::free);
  kern.repack(e.i2s.data(), e.n, e.k, packed.get());
  const QuantizedRows rows{e.q.data(), e.a.data(), e.qsum.data(), e.m, e.k};
  std::vector<std::array<int64_t, 2>> tiles = {{0, e.m}};
  if (!whole_tile) tiles.push_back({0, 3});
  // one token at a time: rows 8-15 mirror rows 0-7 (make_extreme), so the first half holds every row's data
  for (int64_t i = 0; i < e.m / 2 && !whole_tile; ++i) tiles.push_back({i, i + 1});
  std::string err;
  for (size_t t = 0; t < tiles.size() && err.empty(); ++t)
    err = check_extreme_tile(kern, packed.get(), e, rows, tiles[t][0], tiles[t][1]);
  report(err.empty(), tag + " dot", err);
  if (!kern.dot_scaled) return;
  const float s_w = 0.0123f;
  err.clear();
  for (size_t t = 0; t < tiles.size() && err.empty(); ++t) {
    const int64_t m0 = tiles[t][0], m1 = tiles[t][1];
    std::vector<float> y(static_cast<size_t>((m1 - m0) * e.n));
    kern.dot_scaled(packed.get(), e.n, e.k, rows, s_w, m0, m1, 0, e.n, y.data(), e.n);
    for (int64_t i = m0; i < m1 && err.empty(); ++i)
      for (int64_t j = 0; j < e.n && err.empty(); ++j) {
        const float got = y[(i - m0) * e.n + j], want = (static_cast<float>(e.sums[i * e.n + j]) / e.a[i]) * s_w;
        if (!same_float(got, want))
          err = fmt("rows [%" PRId64 ",%" PRId64 "): y[%" PRId64 ",%" PRId64 "] = %.9g, want %.9g", m0, m1, i, j, got,
                    want);
      }
  }
  report(err.empty(), tag + " dot_scaled", err);
}

void check_quantize(const I2SKernel& kern, const Vectors& v, bool norm, const std::string& tag) {
  const std::vector<int8_t>& want_q = norm ? v.q_norm : v.q_plain;
  const std::vector<float>& want_a = norm ? v.a_norm : v.a_plain;
  const std::vector<int32_t>& want_sum = norm ? v.qsum_norm : v.qsum_plain;
  const size_t mk = static_cast<size_t>(v.m * v.k);
  std::unique_ptr<Buffer<float>> x(unaligned_copy(v.x));
  std::unique_ptr<Buffer<float>> w(norm ? unaligned_copy(v.norm_w) : nullptr);
  Buffer<int8_t> q(mk, sizeof(int8_t));
  Buffer<float> a(static_cast<size_t>(v.m), sizeof(float));
  Buffer<int32_t> qsum(static_cast<size_t>(v.m), sizeof(int32_t));
  kern.quantize(x->get(), v.m, v.k, w ? w->get() : nullptr, v.eps, q.get(), a.get(), qsum.get());
  std::string err;
  for (int64_t r = 0; r < v.m && err.empty(); ++r) {
    if (!same_float(a[r], want_a[r]))
      err = fmt("row %" PRId64 ": a = %.9g, want %.9g", r, a[r], want_a[r]);
    else if (qsum[r] != want_sum[r])
      err = fmt("row %" PRId64 ": qsum = %d, want %d", r, qsum[r], want_sum[r]);
    for (int64_t c = 0; c < v.k && err.empty(); ++c)
      if (q[r * v.k + c] != want_q[r * v.k + c])
        err = fmt("q[%" PRId64 ",%" PRId64 "] = %d, want %d (x = %.9g)", r, c, q[r * v.k + c],
                  want_q[r * v.k + c], v.x[r * v.k + c]);
  }
  report(err.empty(), tag + (norm ? " quantize+norm" : " quantize"), err);
}

// ---- the lookup family's rules on avx2, as docs/op.md ("Kernel families") states them: at N >= 512
// (80% of the multiply kernel's cost per 16-token block) and N = 256-511 (90%) these M stay on the
// multiply kernel and every other M up to 256 runs lookups; below N = 256 multiply always runs. Only
// the rules are asked (every family gets a candidate), so every build and CPU checks them.
struct MSpan {
  int64_t first, last;
};

bool in_spans(const std::vector<MSpan>& spans, int64_t m) {
  for (const MSpan& s : spans)
    if (m >= s.first && m <= s.last) return true;
  return false;
}

void check_family_rules() {
  namespace i2s = bitnet_onnx::i2s;
  i2s::Candidates every;
  i2s::Family lut = i2s::kBaseFamily;
  for (i2s::Family f = i2s::kBaseFamily; f < i2s::kFamilyCount; ++f) {
    every.kernel[f] = i2s::family_kernel(f, bitnet_onnx::kIsaScalar);
    if (std::strcmp(i2s::family_name(f), "lut") == 0) lut = f;
  }
  report(lut != i2s::kBaseFamily, "family rules", "no family named lut");
  for (i2s::Family f = i2s::kBaseFamily; f < i2s::kFamilyCount; ++f)  // BITNET_ONNX_KERNEL's other values
    report(std::strcmp(i2s::family_name(f), i2s::kMeasureValue) != 0 && std::strcmp(i2s::family_name(f), i2s::kRulesValue) != 0,
           std::string("family name ") + i2s::family_name(f), "is a BITNET_ONNX_KERNEL value of its own");
  const std::vector<MSpan> multiply_at_512 = {{1, 12}, {17, 25}, {33, 38}, {49, 51}};
  const std::vector<MSpan> multiply_at_256 = {{1, 14},  {17, 28},  {33, 43},   {49, 57},   {65, 72},
                                              {81, 86}, {97, 100}, {113, 115}, {129, 129}};
  const std::vector<MSpan> multiply_always = {{1, 256}};
  const struct {
    int64_t n;
    const std::vector<MSpan>* multiply;
  } widths[] = {{512, &multiply_at_512}, {3072, &multiply_at_512}, {256, &multiply_at_256},
                {511, &multiply_at_256}, {255, &multiply_always}};
  for (const auto& w : widths) {
    std::string wrong;
    for (int64_t m = 1; m <= 256; ++m) {
      const i2s::Family want = in_spans(*w.multiply, m) ? i2s::kBaseFamily : lut;
      if (i2s::select_family(every, bitnet_onnx::kIsaAvx2, m, 1024, w.n) != want && wrong.empty())
        wrong = fmt("M = %" PRId64 " should run %s", m, i2s::family_name(want));
    }
    report(wrong.empty(), fmt("family rules avx2 N = %" PRId64, w.n), wrong);
  }
}

// The measured family choice (measured_choice.h) on a table of its own, with the times handed to
// it: the M buckets tile every M, candidates run their kTrialsPerFamily trials in turns of kTurnCalls calls, the
// fastest per token is chosen from then on, and a shape's choice is its own.
void check_measured_choice() {
  namespace i2s = bitnet_onnx::i2s;
  std::string wrong;
  for (int b = 0; b <= i2s::kLastBucket; ++b) {
    const int64_t first = i2s::bucket_first_m(b), last = i2s::bucket_last_m(b);
    if (i2s::m_bucket(first) != b || i2s::m_bucket(last) != b || (b > 0 && i2s::m_bucket(first - 1) != b - 1))
      wrong = fmt("bucket %d holds M = %" PRId64 "..%" PRId64 " but m_bucket disagrees", b, first, last);
  }
  if (i2s::m_bucket(1) != 0 || i2s::m_bucket(16) != 4 || i2s::m_bucket(17) != 5 || i2s::m_bucket(2048) != 11)
    wrong = "M = 1, 16, 17, 2048 are not in buckets 0, 4, 5, 11";
  report(wrong.empty(), "measured choice buckets", wrong);

  i2s::Candidates every;  // every family's scalar kernel: the choice is made among all of them
  for (i2s::Family f = i2s::kBaseFamily; f < i2s::kFamilyCount; ++f)
    every.kernel[f] = i2s::family_kernel(f, bitnet_onnx::kIsaScalar);
  const bitnet_onnx::Isa isa = bitnet_onnx::kIsaScalar;
  // Shape A: the last family is 3x faster per token; shape B (another N): the base family is.
  i2s::MeasuredChoice table;
  const i2s::Family fast_a = i2s::kFamilyCount - 1;
  std::vector<int> turns(i2s::kFamilyCount, 0);
  for (int call = 0; call < i2s::kFamilyCount * i2s::kTrialsPerFamily; ++call) {
    const i2s::FamilyPick a = table.pick(every, isa, 100, 1024, 512);
    if (!a.timed && wrong.empty()) wrong = fmt("trial call %d was not timed", call);
    if (a.family != call / i2s::kTurnCalls % i2s::kFamilyCount && wrong.empty())
      wrong = fmt("trial call %d ran %s: families take turns of %d calls, in table order", call,
                  i2s::family_name(a.family), i2s::kTurnCalls);
    ++turns[a.family];
    table.record(every, isa, 100, 1024, 512, a.family, a.family == fast_a ? 1e-3 : 3e-3);
    const i2s::FamilyPick b = table.pick(every, isa, 128, 1024, 640);
    table.record(every, isa, 128, 1024, 640, b.family, b.family == i2s::kBaseFamily ? 1e-3 : 2e-3);
  }
  for (i2s::Family f = 0; f < i2s::kFamilyCount; ++f)
    if (turns[f] != i2s::kTrialsPerFamily && wrong.empty())
      wrong = fmt("family %s had %d trials, not %d", i2s::family_name(f), turns[f], i2s::kTrialsPerFamily);
  const i2s::FamilyPick a = table.pick(every, isa, 65, 1024, 512);  // same bucket as M = 100
  const i2s::FamilyPick b = table.pick(every, isa, 128, 1024, 640);
  if (wrong.empty() && (a.timed || a.family != fast_a))
    wrong = fmt("shape A runs %s (timed %d), not the fastest %s", i2s::family_name(a.family), a.timed, i2s::family_name(fast_a));
  if (wrong.empty() && (b.timed || b.family != i2s::kBaseFamily)) wrong = "shape B does not run the base family untimed";
  if (wrong.empty() && table.chosen(isa, 64, 1024, 512) != -1) wrong = "M = 64 (another bucket) has a choice unmeasured";
  const i2s::FamilyPick other = table.pick(every, isa, 64, 1024, 512);
  if (wrong.empty() && !other.timed) wrong = "M = 64 (another bucket) was not measured";
  if (wrong.empty() && table.json().find("\"runs\": \"" + std::string(i2s::family_name(fast_a)) + "\"") == std::string::npos)
    wrong = "json() does not name shape A's choice: " + table.json();
  report(wrong.empty(), "measured choice", wrong);
}

// Kernels of one ISA that name the same layout (I2SKernel::layout) share a node's packed W (driver.cc), so
// they must agree on its size and bytes: checked on every ISA this CPU runs, for a W of rows that are not a
// multiple of any panel height.
void check_shared_layouts() {
  namespace i2s = bitnet_onnx::i2s;
  const int64_t n = 37, k = 256;
  std::vector<int8_t> t(static_cast<size_t>(n * k));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int8_t>((i * 7 + i / 5) % 3) - 1;
  const std::vector<uint8_t> i2s_bytes = i2s_of(t, n, k);
  const bitnet_onnx::CpuFeatures& cpu = bitnet_onnx::cpu_features();
  for (int r = 0; r < bitnet_onnx::kIsaCount; ++r) {
    const bitnet_onnx::IsaRecord& isa = bitnet_onnx::isa_table()[r];
    if (!isa.built || !isa.available(cpu)) continue;
    for (i2s::Family a = 0; a < i2s::kFamilyCount; ++a)
      for (i2s::Family b = a + 1; b < i2s::kFamilyCount; ++b) {
        const I2SKernel* ka = i2s::family_kernel(a, isa.isa);
        const I2SKernel* kb = i2s::family_kernel(b, isa.isa);
        if (!ka || !kb || !ka->layout || !kb->layout || std::strcmp(ka->layout, kb->layout) != 0) continue;
        const size_t bytes = ka->packed_bytes(n, k);
        std::vector<uint8_t> pa(bytes), pb(bytes);
        const bool same_size = kb->packed_bytes(n, k) == bytes;
        if (same_size) {
          ka->repack(i2s_bytes.data(), n, k, pa.data());
          kb->repack(i2s_bytes.data(), n, k, pb.data());
        }
        report(same_size && pa == pb, fmt("layout %s of %s and %s", ka->layout, ka->name, kb->name),
               same_size ? "repack writes other bytes" : "packed_bytes differ");
      }
  }
}

// ---- --threads (the driver: quantization, tiling over the host's threads, epilogue)

// A pool of `threads` std::threads taking job indices from a shared counter (threads == 1: a loop).
struct ThreadPool {
  int threads;
  static void run(void* self, void (*job)(void*, size_t), size_t count, void* arg) {
    const int threads = static_cast<ThreadPool*>(self)->threads;
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < count;) job(arg, i);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
  }
};

constexpr float kDriverSw = 0.37f;

// y of MatMul::run (the op's path: constant W, fused norm when the case has one, s_w = kDriverSw) on
// `isa` forced to `family` (null: measured), split over `threads` threads.
std::vector<float> driver_y(bitnet_onnx::Isa isa, const char* family, const Vectors& v, int threads) {
  bitnet_onnx::i2s::MatMul matmul(isa, family);
  matmul.set_weights(v.i2s.data(), v.n, v.k);
  std::vector<float> y(static_cast<size_t>(v.m * v.n), std::nanf(""));
  bitnet_onnx::i2s::Call call;
  call.x = v.x.data(), call.m = v.m, call.k = v.k, call.n = v.n;
  call.norm = v.has_norm ? v.norm_w.data() : nullptr;
  call.eps = v.eps, call.s_w = kDriverSw, call.y = y.data();
  ThreadPool pool{threads};
  matmul.run(call, bitnet_onnx::i2s::ParallelFor{&pool, ThreadPool::run});
  return y;
}

// The driver's y on a file case when the file's dot input is the driver's own quantized rows (q_norm, or
// q_plain without a norm weight: make_kernel_vectors.py): the op's epilogue, (float(sum) / a) * s_w, of the
// file's exact sums with numpy's a; empty when the case sets its dot input apart (the scalar driver then).
std::vector<float> file_driver_y(const Vectors& v) {
  const std::vector<int8_t>& q = v.has_norm ? v.q_norm : v.q_plain;
  const std::vector<float>& a = v.has_norm ? v.a_norm : v.a_plain;
  if (v.x.empty() || q != v.q_dot) return {};
  std::vector<float> y(static_cast<size_t>(v.m * v.n));
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.n; ++j) y[i * v.n + j] = (static_cast<float>(v.sums[i * v.n + j]) / a[i]) * kDriverSw;
  return y;
}

// The driver on the kernel's ISA and family at each thread count == `want` (file_driver_y, else the scalar
// multiply kernel's driver on one thread), bit for bit (every float, NaN rows as NaN).
void check_driver_y(const std::vector<float>& got, const std::vector<float>& want, const std::string& tag) {
  int64_t bad = -1;
  for (size_t i = 0; i < got.size() && bad < 0; ++i)
    if (!same_float(got[i], want[i])) bad = static_cast<int64_t>(i);
  report(bad < 0, tag, bad < 0 ? "" : fmt("y[%" PRId64 "] = %a, want %a", bad, got[bad], want[bad]));
}

void check_driver(bitnet_onnx::Isa isa, const char* family, const Vectors& v, const std::vector<float>& want,
                  const std::vector<int>& threads, const std::string& tag) {
  for (const int t : threads)
    check_driver_y(driver_y(isa, family, v, t), want, tag + fmt(" driver %d thread%s", t, t == 1 ? "" : "s"));
}

// The driver on `isa` with its family measured (BITNET_ONNX_KERNEL unset, measured_choice.h): through
// every family's trials and past the choice, every call == `want` bit for bit. Each family's own bits are
// check_driver's (forced); this checks the plumbing (every layout packed, trials, the choice), on the
// first kMeasuredCases small cases of a kernel: its kFamilyCount x kTrialsPerFamily + 1 calls a case would
// multiply the emulated runs' time.
constexpr int kMeasuredCases = 4;
constexpr int64_t kMeasuredMaxMacs = int64_t{1} << 22;
void check_measured_driver(bitnet_onnx::Isa isa, const Vectors& v, const std::vector<float>& want, int threads,
                           const std::string& tag) {
  namespace i2s = bitnet_onnx::i2s;
  for (int call = 0; call <= i2s::kFamilyCount * i2s::kTrialsPerFamily; ++call)
    check_driver_y(driver_y(isa, nullptr, v, threads), want, tag + fmt(" measured driver call %d", call));
}

// A trial's clock (driver.cc): with every job on the calling thread, the time the caller spends off the CPU
// (another process's turn on the core, a container's quota running out) must not count. A 1-thread pool sleeps
// kStall before the jobs of the base family's trials: its best time must stay far below kStall (by the wall
// clock it would be above it, and the choice would fall to another family).
constexpr auto kStall = std::chrono::milliseconds(40);
struct StallingPool {
  bool stall = false;
  static void run(void* self, void (*job)(void*, size_t), size_t count, void* arg) {
    if (static_cast<StallingPool*>(self)->stall) std::this_thread::sleep_for(kStall);
    for (size_t i = 0; i < count; ++i) job(arg, i);
  }
};

void check_trials_count_the_callers_cpu_time() {
  namespace i2s = bitnet_onnx::i2s;
  const bitnet_onnx::Isa isa = bitnet_onnx::select_isa(nullptr, nullptr)->isa;  // this CPU's default path
  std::vector<i2s::Family> turns;  // the candidates in table order: who runs each turn of kTurnCalls calls
  for (i2s::Family f = 0; f < i2s::kFamilyCount; ++f)
    if (i2s::family_kernel(f, isa)) turns.push_back(f);
  const int64_t m = 1, k = 1024, n = 777;  // a shape no other check measures; several jobs: the pool runs them
  std::vector<int8_t> t(static_cast<size_t>(n * k));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int8_t>((i * 5 + i / 7) % 3) - 1;
  const std::vector<uint8_t> w = i2s_of(t, n, k);
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
  i2s::Call call;
  call.x = x.data(), call.m = m, call.k = k, call.n = n, call.s_w = 1.0f, call.y = y.data();
  StallingPool pool;
  i2s::MatMul matmul(isa, nullptr);
  matmul.set_weights(w.data(), n, k);
  for (int c = 0; c < static_cast<int>(turns.size()) * i2s::kTrialsPerFamily; ++c) {
    pool.stall = turns[static_cast<size_t>(c / i2s::kTurnCalls) % turns.size()] == i2s::kBaseFamily;
    matmul.run(call, i2s::ParallelFor{&pool, StallingPool::run});
  }
  const double base_ns = i2s::measured_choice().best_ns_per_token(isa, m, k, n, i2s::kBaseFamily);
  const double stall_ns = std::chrono::duration<double, std::nano>(kStall).count();
  report(i2s::measured_choice().chosen(isa, m, k, n) >= 0 && base_ns > 0 && base_ns < stall_ns / 2,
         std::string("measured choice on ") + bitnet_onnx::isa_table()[isa].name + ", trials stalled off the CPU",
         fmt("the base family's best trial took %.0f ns per token; the pool slept %.0f ns before each", base_ns, stall_ns));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> kernels, files;
  std::vector<int64_t> extreme_ks;
  std::string generated;  // "", "small" or "full"
  std::vector<int> threads;  // --threads: the driver at each count
  int64_t driver_once_above = -1;  // --driver-once-above: bigger files at the last count only
  std::vector<std::string> extreme_whole;  // --extreme-whole-tile: kernels checked at --extreme-k on the whole tile
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--list-kernels") == 0) {  // the ISA table, as the library exports it
      std::fputs(bitnet_onnx::isa_table_text().c_str(), stdout);
      return 0;
    }
    if (std::strcmp(argv[i], "--kernels") == 0 && i + 1 < argc) {
      kernels = split(argv[++i], ',');
    } else if (std::strcmp(argv[i], "--generated") == 0 && i + 1 < argc) {
      generated = argv[++i];
      if (generated != "small" && generated != "full") {
        std::fprintf(stderr, "--generated: %s is not small or full\n", generated.c_str());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      for (const std::string& t : split(argv[++i], ',')) {
        const int v = std::atoi(t.c_str());
        if (v < 1 || v > 64) {
          std::fprintf(stderr, "--threads: %s is not a thread count of 1..64\n", t.c_str());
          return 2;
        }
        threads.push_back(v);
      }
    } else if (std::strcmp(argv[i], "--driver-once-above") == 0 && i + 1 < argc) {
      driver_once_above = std::atoll(argv[++i]);
      if (driver_once_above < 1) {
        std::fprintf(stderr, "--driver-once-above: %s is not a positive count of multiply-adds\n", argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--extreme-whole-tile") == 0 && i + 1 < argc) {
      extreme_whole = split(argv[++i], ',');
    } else if (std::strcmp(argv[i], "--extreme-k") == 0 && i + 1 < argc) {
      for (const std::string& k : split(argv[++i], ',')) {
        const int64_t v = std::atoll(k.c_str());
        if (v < 128 || v % 128 != 0) {
          std::fprintf(stderr, "--extreme-k: %s is not a positive multiple of 128\n", k.c_str());
          return 2;
        }
        extreme_ks.push_back(v);
      }
    } else {
      files.push_back(argv[i]);
    }
  }
  if (kernels.empty() || (files.empty() && extreme_ks.empty() && generated.empty())) {
    std::fprintf(stderr, "usage: kernel_test --kernels scalar,avx2,lut-avx2,... [--extreme-k K,...] [--generated small|full] "
                         "[--threads 1,2,...] [--driver-once-above MACS] [--extreme-whole-tile KERNEL,...] [FILE.i2sv...] | "
                         "--list-kernels\n");
    return 2;
  }
  const bitnet_onnx::CpuFeatures& cpu = bitnet_onnx::cpu_features();
  std::printf("cpu: avx2=%d avxvnni=%d avx512vnni=%d neon=%d dotprod=%d i8mm=%d\n", cpu.avx2, cpu.avxvnni,
              cpu.avx512vnni, cpu.neon, cpu.dotprod, cpu.i8mm);

  // Every record of the ISA table this build has maps to a multiply kernel of that name, and no
  // other record to any (mul/dispatch.cc's rows against isa.cc's `built`); every other family
  // has no kernel where the record is not built and its scalar reference (families.h's rows).
  namespace i2s = bitnet_onnx::i2s;
  for (int i = 0; i < bitnet_onnx::kIsaCount; ++i) {
    const bitnet_onnx::IsaRecord& isa = bitnet_onnx::isa_table()[i];
    const I2SKernel* kern = i2s::family_kernel(i2s::kBaseFamily, isa.isa);
    report(isa.built ? kern != nullptr && std::strcmp(kern->name, isa.name) == 0 && kern->quantize != nullptr
                     : kern == nullptr,
           std::string("ISA table row ") + isa.name,
           isa.built ? "built, but its multiply kernel (with the ISA's quantizer) is missing or named otherwise"
                     : "not built, but has a kernel");
    for (i2s::Family f = i2s::kBaseFamily + 1; f < i2s::kFamilyCount; ++f) {
      const I2SKernel* fk = i2s::family_kernel(f, isa.isa);
      const bool ok = isa.isa == bitnet_onnx::kIsaScalar ? fk != nullptr : isa.built || fk == nullptr;
      report(ok, std::string("family ") + i2s::family_name(f) + " row " + isa.name,
             fk ? "not built, but has a kernel" : "no scalar reference kernel");
      // the driver quantizes with the ISA's quantizer (family.h): a family's own would go unused
      if (fk) report(fk->quantize == nullptr, std::string(fk->name) + " quantize", "set, but only the base family's run");
    }
  }
  check_family_rules();
  check_measured_choice();
  check_trials_count_the_callers_cpu_time();
  check_shared_layouts();

  std::vector<Vectors> cases(files.size());
  for (size_t f = 0; f < files.size(); ++f) {
    std::string err;
    const char* slash = std::strrchr(files[f].c_str(), '/');
    cases[f].name = slash ? slash + 1 : files[f];
    report(load(files[f].c_str(), &cases[f], &err), "load " + files[f], err);
    if (!err.empty()) cases[f].m = 0;
  }
  for (const auto& c : generated_cases(generated == "full")) {
    if (generated.empty()) break;
    cases.push_back(make_generated(c[0], c[1], c[2], static_cast<Fill>(c[3])));
  }
  std::vector<std::vector<float>> want_y(cases.size());  // --threads: the reference, once per case
  int by_file = 0, by_scalar = 0;
  for (size_t c = 0; c < cases.size() && !threads.empty(); ++c) {
    if (cases[c].m == 0 || cases[c].x.empty()) continue;
    want_y[c] = file_driver_y(cases[c]);
    ++(want_y[c].empty() ? by_scalar : by_file);
    if (want_y[c].empty()) want_y[c] = driver_y(bitnet_onnx::kIsaScalar, i2s::family_name(i2s::kBaseFamily), cases[c], 1);
  }
  if (!threads.empty())
    std::printf("driver reference: %d cases by the files' sums, %d by the scalar driver\n", by_file, by_scalar);
  for (const std::string& name : extreme_whole)
    report(std::find(kernels.begin(), kernels.end(), name) != kernels.end(), "--extreme-whole-tile " + name,
           "not among --kernels");
  for (const std::string& name : kernels) {
    std::string err;
    bitnet_onnx::Isa isa = bitnet_onnx::kIsaScalar;
    i2s::Family family = i2s::kBaseFamily;
    const I2SKernel* kern = i2s::kernel_named(name.c_str(), &isa, &family, &err);
    report(kern != nullptr, "select_kernel(" + name + ")", err);
    if (!kern) continue;
    report(std::strcmp(kern->name, name.c_str()) == 0, "select_kernel(" + name + ")",
           std::string("returned the kernel named ") + kern->name);
    const int before = g_failed;
    int driver_cases = 0, measured_cases = 0, once_cases = 0;
    for (size_t c = 0; c < cases.size(); ++c) {
      const Vectors& v = cases[c];
      if (v.m == 0) continue;
      const std::string tag = name + " " + v.name;
      check_dot(*kern, v, tag);
      if (v.x.empty()) continue;  // --generated: integer inputs only
      if (threads.empty()) continue;
      const bool once = driver_once_above > 0 && v.m * v.n * v.k > driver_once_above;
      once_cases += once;
      check_driver(isa, i2s::family_name(family), v, want_y[c], once ? std::vector<int>{threads.back()} : threads, tag);
      if (family == i2s::kBaseFamily && measured_cases < kMeasuredCases && v.m * v.n * v.k <= kMeasuredMaxMacs) {
        check_measured_driver(isa, v, want_y[c], threads.back(), tag);
        ++measured_cases;
      }
      ++driver_cases;
      if (!kern->quantize) continue;  // not the base family: the driver runs the ISA's quantizer (checked there)
      check_quantize(*kern, v, false, tag);
      if (v.has_norm) check_quantize(*kern, v, true, tag);
    }
    if (!threads.empty())
      std::printf("%s driver: %d cases at %zu thread counts, %d measured%s: %s\n", name.c_str(), driver_cases,
                  threads.size(), measured_cases,
                  driver_once_above > 0 ? fmt(", %d at the last count only", once_cases).c_str() : "",
                  g_failed == before ? "ok" : "FAILED");
    for (const int64_t k : extreme_ks) {  // built per kernel: one case in memory at a time
      ExtremeCase e;
      const std::string tag = name + fmt(" extreme K=%" PRId64, k), err = make_extreme(k, &e);
      report(err.empty(), tag, err);
      const int before_k = g_failed;
      if (err.empty())
        check_extreme(*kern, e, tag, std::find(extreme_whole.begin(), extreme_whole.end(), name) != extreme_whole.end());
      std::printf("%s: %s\n", tag.c_str(), g_failed == before_k ? "ok" : "FAILED");
    }
    std::printf("kernel %s: %s\n", name.c_str(), g_failed == before ? "ok" : "FAILED");
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
