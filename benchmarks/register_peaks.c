/* Register-only loops, one per kernel path (PATH selects), timed on the thread's CPU clock: the peak GOP/s
   (GFLOP/s for EncoderAttention's float loops, a multiply-add counting 2) each path is judged against in
   benchmarks/bench_op.py and benchmarks/bench_attention.py, which compile and run this file. LOOPS below is
   the one list of them: built without PATH, this file prints it for those scripts, which hold none. */
#if defined(__x86_64__)
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#ifndef PATH
/* One row per loop build: the op whose path it bounds, the path's name as the library's dispatch names it (a
   kernel of customops.dispatch(), an attention tile path; "stream" is the M=1 memory bound, which reads
   -DBYTES of packed weights), the PATH that selects it below, its compiler flags and what it runs. A name's
   rows are tried in order and the first that builds and runs here is its peak: the AVX-VNNI loop falls back
   to the EVEX form of the same instruction (same ports) on a CPU with AVX512-VNNI but no AVX-VNNI. Only this
   machine's rows are listed. */
#define I2S "I2STernaryMatMul"
#define ATTENTION "EncoderAttention"
static const struct { const char *op, *name; int path; const char *flags, *what; } LOOPS[] = {
#if defined(__x86_64__)
    {I2S, "avx2", 0, "-mavx2", "vpmaddubsw+vpaddw ymm"},
    {I2S, "avxvnni", 1, "-mavx2 -mavxvnni", "vpdpbusd ymm (VEX)"},
    {I2S, "avxvnni", 1, "-mavx2 -mavx512f -mavx512vl -mavx512vnni",
     "vpdpbusd ymm, EVEX form as a proxy: this CPU has AVX512-VNNI but no AVX-VNNI"},
    {I2S, "avx512vnni", 2, "-mavx512f -mavx512vnni", "vpdpbusd zmm"},
    {I2S, "amx", 3, "-mamx-tile -mamx-int8", "tdpbusd 4 tiles"},
    {I2S, "stream", 4, "-mavx2", "32-byte loads of -DBYTES bytes"},
    /* mul_direct's kernels run the multiply kernels' step (their direct path at every M): the same loops */
    {I2S, "mul_direct-avx2", 0, "-mavx2", "vpmaddubsw+vpaddw ymm"},
    {I2S, "mul_direct-avxvnni", 1, "-mavx2 -mavxvnni", "vpdpbusd ymm (VEX)"},
    {I2S, "mul_direct-avxvnni", 1, "-mavx2 -mavx512f -mavx512vl -mavx512vnni",
     "vpdpbusd ymm, EVEX form as a proxy: this CPU has AVX512-VNNI but no AVX-VNNI"},
    {I2S, "mul_direct-avx512vnni", 2, "-mavx512f -mavx512vnni", "vpdpbusd zmm"},
    {I2S, "lut-avx2", 5, "-mavx2", "pattern byte from a word + vpaddw ymm from 41 KB of L1 tables"},
    {I2S, "lut-avx512", 6, "-mavx512f -mavx512bw", "pattern byte from a word + vpaddw zmm from 41 KB of L1 tables"},
    /* the co-issue ceiling (i2s/mixed/'s kernel, judged against it): vpdpbusd zmm and lookups in one loop */
    {I2S, "mixed-avx512vnni", 15, "-mavx512f -mavx512bw -mavx512vnni",
     "12 vpdpbusd zmm + 3 lookups (pattern byte from a word + vpaddw zmm) per iteration"},
    {ATTENTION, "amxbf16", 11, "-mamx-tile -mamx-bf16", "tdpbf16ps, 4 tiles"},
    {ATTENTION, "avx512", 12, "-mavx512f", "vfmadd231ps zmm"},
    {ATTENTION, "avx512bf16", 13, "-mavx512f -mavx512bf16", "vdpbf16ps zmm"},
    {ATTENTION, "avx2", 14, "-mavx2 -mfma", "vfmadd231ps ymm"},
#else
    {I2S, "stream", 4, "", "32-byte loads of -DBYTES bytes"},
    {I2S, "neon", 7, "", "smlal int8 -> int16 q"},
    {I2S, "dotprod", 8, "-march=armv8.2-a+dotprod", "sdot q"},
    {I2S, "i8mm", 9, "-march=armv8.2-a+dotprod+i8mm", "smmla q (2x8 by 8x2)"},
    {I2S, "lut-neon", 10, "", "byte index + add .8h q from 31 KB of L1 tables"},
#endif
};
/* the table, a row a line: op, name, PATH, flags, what (tab-separated) */
int main(void) {
  for (size_t i = 0; i < sizeof LOOPS / sizeof LOOPS[0]; ++i)
    printf("%s\t%s\t%d\t%s\t%s\n", LOOPS[i].op, LOOPS[i].name, LOOPS[i].path, LOOPS[i].flags, LOOPS[i].what);
  return 0;
}
#else
#if PATH == 3 || PATH == 11
#include <sys/syscall.h>
#include <unistd.h>
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define R(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#if defined(__x86_64__)
#define VREG "+v"
#else
#define VREG "+w" /* an Advanced SIMD register */
#endif
#define KEEP __asm__ volatile("" : VREG(a0), VREG(a1), VREG(a2), VREG(a3), VREG(a4), VREG(a5), VREG(a6), VREG(a7), VREG(a8), VREG(a9), VREG(a10), VREG(a11))
int main(void) {
  const long iters = 4000000;
  double best = 0;
  long sink = 0;
#if PATH == 3 || PATH == 11
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 1;  /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
  struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((aligned(64))) cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
  _tile_loadconfig(&cfg);
  static int8_t buf[1024] __attribute__((aligned(64)));
  memset(buf, 1, sizeof buf);
#if PATH == 11
  for (int i = 0; i < 512; ++i) ((uint16_t*)buf)[i] = 0x3F80;  /* bf16 1.0: no denormal operands */
#endif
#endif
  for (int r = 0; r < 5; ++r) {
    double ops = 0, t0 = 0;  /* ops per unit; 12 units per iteration */
    /* Each path but 0 and 4 defines its vector type V, ZERO, LANE0 and either DP (one accumulate
       instruction: a = DP(a, b, c)) or LOOKUP (a = LOOKUP(a, i): add the table entry unit i's index picks);
       the loop of 12 independent accumulators after this chain runs it. */
#if PATH == 0
    __m256i b = _mm256_set1_epi8(1), c = _mm256_set1_epi8(2);
#define D(i) __m256i a##i = _mm256_set1_epi16(i);
    R(D)
    t0 = now();
    for (long it = 0; it < iters; ++it) {
      /* the barrier on b keeps the compiler from hoisting the loop-invariant multiply */
#define U(i) __asm__ volatile("" : "+v"(b)); a##i = _mm256_add_epi16(a##i, _mm256_maddubs_epi16(b, c));
      R(U) KEEP;
    }
    ops = 64.0;
#define S(i) sink += _mm256_extract_epi16(a##i, 0);
    R(S)
#elif PATH == 1 || PATH == 2
#if PATH == 1
    typedef __m256i V;
    V b = _mm256_set1_epi8(1), c = _mm256_set1_epi8(2);
#if defined(__AVXVNNI__)
#define DP(a, b, c) _mm256_dpbusd_avx_epi32(a, b, c)
#else
#define DP(a, b, c) _mm256_dpbusd_epi32(a, b, c)
#endif
#define ZERO _mm256_setzero_si256()
#define LANE0(v) _mm256_extract_epi32(v, 0)
    ops = 64.0;
#else
    typedef __m512i V;
    V b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(2);
#define DP(a, b, c) _mm512_dpbusd_epi32(a, b, c)
#define ZERO _mm512_setzero_si512()
#define LANE0(v) _mm_cvtsi128_si32(_mm512_castsi512_si128(v))
    ops = 128.0;
#endif
#elif PATH == 4
    /* read BYTES bytes (the layer's packed weights; L3-resident after the first pass) per unit;
       32-byte vectors of the compiler's own (ymm on x86-64 with -mavx2, q pairs on aarch64) */
    typedef long long V32 __attribute__((vector_size(32)));
    static V32 buf[BYTES / 32] __attribute__((aligned(64)));
    if (r == 0) memset(buf, 1, sizeof buf);
    V32 s0 = {0}, s1 = s0, s2 = s0, s3 = s0;
    t0 = now();
    for (long it = 0; it < 50; ++it)
      for (long i = 0; i < BYTES / 32; i += 4) {
        s0 ^= buf[i]; s1 ^= buf[i + 1]; s2 ^= buf[i + 2]; s3 ^= buf[i + 3];
      }
    sink += ((s0 ^ s1) ^ (s2 ^ s3))[0];
    ops = 50.0 * BYTES / iters / 12;  /* reported "GOP/s" = GB/s */
#elif PATH == 5 || PATH == 6
    /* the lookup step: a pattern byte indexes a table entry (tokens x int16) added with vpaddw;
       tables as the kernels size them (41 KB: L1); the bytes cut out of 8-byte words as the kernels do
       (lut_tables.h: a shift and a mask each, no byte load) */
#if PATH == 5
    typedef __m256i V;
#define LD(p) _mm256_load_si256((const V*)(p))
#define ADDW _mm256_add_epi16
#define ZERO _mm256_setzero_si256()
#define LANE0(v) _mm256_extract_epi32(v, 0)
#define ENTRY 32
#define GROUPS 16
    ops = 128.0;  /* 16 tokens x 4 weights x 2 */
#else
    typedef __m512i V;
#define LD(p) _mm512_load_si512(p)
#define ADDW _mm512_add_epi16
#define ZERO _mm512_setzero_si512()
#define LANE0(v) _mm_cvtsi128_si32(_mm512_castsi512_si128(v))
#define ENTRY 64
#define GROUPS 8
    ops = 256.0;  /* 32 tokens x 4 weights x 2 */
#endif
#define TABLE_INT16S (GROUPS * 81 * ENTRY / 2)
#define LOOKUP(a, i) ADDW(a, LD((const char*)table + ((i) % GROUPS) * 81 * ENTRY + ENTRY_AT(i)))
#elif PATH == 15
    /* co-issue: the avx512vnni unit (DP on the 12 accumulators) with MIXED lookups of lut-avx512's step
       into accumulators of their own in the same iteration; a multiply uses the vector multiply pipes, a
       lookup a load and a vector add, so a core may run both at once */
    typedef __m512i V;
    V b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(2);
#define DP(a, b, c) _mm512_dpbusd_epi32(a, b, c)
#define LD(p) _mm512_load_si512(p)
#define ZERO _mm512_setzero_si512()
#define LANE0(v) _mm_cvtsi128_si32(_mm512_castsi512_si128(v))
#define ENTRY 64
#define GROUPS 8
#define MIXED 3
#define TABLE_INT16S (GROUPS * 81 * ENTRY / 2)
#define LOOKUP(a, i) _mm512_add_epi16(a, LD((const char*)table + ((i) % GROUPS) * 81 * ENTRY + ENTRY_AT(i)))
    ops = (12 * 128.0 + MIXED * 256.0) / 12;  /* per unit: 12 vpdpbusd of 64 MACs, MIXED lookups of 128 */
#elif PATH == 7 || PATH == 8 || PATH == 9
    /* aarch64: smlal (neon: int8 x int8 -> int16), sdot (dotprod), smmla (i8mm) */
#if PATH == 7
    typedef int16x8_t V;
#define DP(a, b, c) vmlal_s8(a, vget_low_s8(b), vget_low_s8(c))
#define ZERO vdupq_n_s16(0)
#define LANE0(v) vgetq_lane_s16(v, 0)
    ops = 16.0;  /* 8 MACs */
#elif PATH == 8
    typedef int32x4_t V;
#define DP(a, b, c) vdotq_s32(a, b, c)
#define ZERO vdupq_n_s32(0)
#define LANE0(v) vgetq_lane_s32(v, 0)
    ops = 32.0;  /* 16 MACs */
#else
    typedef int32x4_t V;
#define DP(a, b, c) vmmlaq_s32(a, b, c)
#define ZERO vdupq_n_s32(0)
#define LANE0(v) vgetq_lane_s32(v, 0)
    ops = 64.0;  /* 32 MACs */
#endif
    int8x16_t b = vdupq_n_s8(1), c = vdupq_n_s8(2);
#elif PATH == 10
    /* lut-neon's step: a pattern byte indexes a 16-token entry (two q registers) added with
       add .8h; 12 groups of tables (31 KB: L1); units of 8 tokens: each entry's two halves go to
       alternate accumulators */
    typedef int16x8_t V;
#define ZERO vdupq_n_s16(0)
#define LANE0(v) vgetq_lane_s16(v, 0)
#define TABLE_INT16S (12 * 81 * 16)
#define LOOKUP(a, i) vaddq_s16(a, vld1q_s16(table + ((i) / 2) * 81 * 16 + (size_t)ix[(i) / 2] * 16 + ((i) % 2) * 8))
    ops = 64.0;  /* 8 tokens x 4 weights x 2 */
#elif PATH == 3 || PATH == 11
    /* tdpbusd (int8, 16x16x64 MACs per instruction into int32) or tdpbf16ps (16 rows x 16 columns x 32 bf16,
       16 pairs, into float32): 4 independent C tiles as the amx kernel and amxbf16.cc's scores use them */
#if PATH == 3
#define TDP _tile_dpbusd
    ops = 16.0 * 16 * 64 * 2 * 4 / 16 / 12;  /* iters/16 rounds of 4 tiles x 16x16x64 MACs */
#else
#define TDP _tile_dpbf16ps
    ops = 16.0 * 16 * 32 * 2 * 4 / 16 / 12;  /* iters/16 rounds of 4 tiles x 16x16x32 multiply-adds */
#endif
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64); _tile_loadd(7, buf, 64);
    t0 = now();
    for (long it = 0; it < iters / 16; ++it) {
      TDP(0, 4, 6); TDP(1, 4, 7); TDP(2, 5, 6); TDP(3, 5, 7);
    }
    _tile_stored(0, buf, 64);
    sink += buf[0];
#elif PATH == 12 || PATH == 13 || PATH == 14
    /* the float units of the attention paths: vfmadd231ps zmm (avx512), vdpbf16ps zmm (avx512bf16: a
       bf16 pair per float32 lane), vfmadd231ps ymm (avx2) */
#if PATH == 14
    typedef __m256 V;
    __m256 b = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(1e-6f);
#define DP(a, b, c) _mm256_fmadd_ps(b, c, a)
#define ZERO _mm256_setzero_ps()
#define LANE0(v) (long)_mm256_cvtss_f32(v)
    ops = 16.0;  /* 8 lanes x 2 */
#else
    typedef __m512 V;
#define ZERO _mm512_setzero_ps()
#define LANE0(v) (long)_mm512_cvtss_f32(v)
#if PATH == 12
    __m512 b = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(1e-6f);
#define DP(a, b, c) _mm512_fmadd_ps(b, c, a)
    ops = 32.0;  /* 16 lanes x 2 */
#else
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3F80), c = (__m512bh)_mm512_set1_epi16(0x3580);  /* 1.0, ~1e-6 */
#define DP(a, b, c) _mm512_dpbf16_ps(a, b, c)
    ops = 64.0;  /* 16 lanes x 2 products x 2 */
#endif
#endif
#endif
#if defined(DP) || defined(LOOKUP)
#if defined(LOOKUP)
    static int16_t table[TABLE_INT16S] __attribute__((aligned(64)));
    static uint8_t idx[4096 + 16];
    if (r == 0) {
      unsigned lcg = 12345;
      memset(table, 1, sizeof table);
      for (int i = 0; i < 4096 + 16; ++i) { lcg = lcg * 1103515245u + 12345u; idx[i] = (lcg >> 16) % 81; }
    }
#endif
#define D(i) V a##i = ZERO;
    R(D)
#if defined(MIXED)
    V l0 = ZERO, l1 = ZERO, l2 = ZERO;  /* the MIXED (3) lookups' accumulators */
#endif
    t0 = now();
    for (long it = 0; it < iters; ++it) {
#if defined(LOOKUP) && PATH == 10
      const uint8_t* ix = idx + ((it * 12) & 4095); /* lut-neon loads its pattern bytes one by one */
#elif defined(LOOKUP)
      uint64_t words[2]; /* the iteration's 12 pattern bytes (of 16) */
      memcpy(words, idx + ((it * 12) & 4095), sizeof words);
#define ENTRY_SHIFT (ENTRY == 64 ? 6 : 5)
#define ENTRY_AT(i) ((size_t)((i) % 8 == 0 ? (words[(i) / 8] << ENTRY_SHIFT) & (0xFFull << ENTRY_SHIFT) \
                                          : (words[(i) / 8] >> (8 * ((i) % 8) - ENTRY_SHIFT)) & (0xFFull << ENTRY_SHIFT)))
#endif
#if defined(MIXED)
#define U(i) a##i = DP(a##i, b, c);
      R(U) KEEP;
      l0 = LOOKUP(l0, 0);
      l1 = LOOKUP(l1, 1);
      l2 = LOOKUP(l2, 2);
      __asm__ volatile("" : VREG(l0), VREG(l1), VREG(l2));
#elif defined(LOOKUP)
#define U(i) a##i = LOOKUP(a##i, i);
      R(U) KEEP;
#else
#define U(i) a##i = DP(a##i, b, c);
      R(U) KEEP;
#endif
    }
#define S(i) sink += LANE0(a##i);
    R(S)
#if defined(MIXED)
    sink += LANE0(l0) + LANE0(l1) + LANE0(l2);
#endif
#endif
    double dt = now() - t0, gops = iters * 12.0 * ops / dt / 1e9;
    if (gops > best) best = gops;
  }
  printf("%.1f %ld\n", best, sink & 1);
  return 0;
}
#endif
