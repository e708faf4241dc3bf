// SIMD row primitives of the KV selection core (see kv_internal.hpp).
#include <cmath>
#include <cstring>
#include <string>

#include "kv_internal.hpp"
#include "lamina/common.hpp"
#include "lamina/isa.hpp"

#if defined(LAMINA_ISA_TARGETS)
#include <immintrin.h>
#endif

namespace lamina::kv::detail {

namespace {

// ------------------------------------------------------------------------------- scalar
void count_scalar(const float* x, std::size_t n, float t, std::size_t* gt, std::size_t* eq) {
  std::size_t g = 0, e = 0;
  for (std::size_t j = 0; j < n; ++j) {
    g += x[j] > t;
    e += x[j] == t;
  }
  *gt = g;
  *eq = e;
}

std::size_t band_scalar(const float* x, std::size_t n, float lo, float hi, float* out,
                        std::size_t* above) {
  std::size_t w = 0, a = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float v = x[j];
    a += v > hi;
    if (v >= lo && v <= hi) out[w++] = v;
  }
  *above = a;
  return w;
}

std::size_t positions_scalar(const float* x, std::size_t n, float t, bool ge, int64_t base,
                             int64_t* out) {
  std::size_t w = 0;
  if (ge) {
    for (std::size_t j = 0; j < n; ++j)
      if (x[j] >= t) out[w++] = base + static_cast<int64_t>(j);
  } else {
    for (std::size_t j = 0; j < n; ++j)
      if (x[j] > t) out[w++] = base + static_cast<int64_t>(j);
  }
  return w;
}

std::size_t nth_equal_scalar(const float* x, std::size_t n, float t, std::size_t m) {
  for (std::size_t j = 0; j < n; ++j)
    if (x[j] == t && --m == 0) return j;
  return n;
}

std::size_t collect_scalar(const float* x, std::size_t n, float lo, float* vals,
                           int32_t* pos) {
  std::size_t w = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float v = x[j];
    vals[w] = v;  // branch-free: always write, advance on a hit
    pos[w] = static_cast<int32_t>(j);
    w += v >= lo;
  }
  return w;
}

const RowKernels kScalar{"scalar", count_scalar, band_scalar, positions_scalar,
                         nth_equal_scalar, collect_scalar};

#if defined(LAMINA_ISA_TARGETS)
// ------------------------------------------------------------------------------- AVX2
#define LAMINA_AVX2 __attribute__((target("avx2,popcnt")))

// permutation that packs the set lanes of an 8-bit mask to the front
struct PackTable {
  alignas(32) int32_t idx[256][8];
  PackTable() {
    for (int m = 0; m < 256; ++m) {
      int w = 0;
      for (int b = 0; b < 8; ++b)
        if (m & (1 << b)) idx[m][w++] = b;
      for (; w < 8; ++w) idx[m][w] = 0;
    }
  }
};
const PackTable kPack;

LAMINA_AVX2 void count_avx2(const float* x, std::size_t n, float t, std::size_t* gt,
                            std::size_t* eq) {
  const __m256 vt = _mm256_set1_ps(t);
  std::size_t g = 0, e = 0, j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    g += __builtin_popcount(_mm256_movemask_ps(_mm256_cmp_ps(v, vt, _CMP_GT_OQ)));
    e += __builtin_popcount(_mm256_movemask_ps(_mm256_cmp_ps(v, vt, _CMP_EQ_OQ)));
  }
  for (; j < n; ++j) {
    g += x[j] > t;
    e += x[j] == t;
  }
  *gt = g;
  *eq = e;
}

LAMINA_AVX2 std::size_t band_avx2(const float* x, std::size_t n, float lo, float hi, float* out,
                                  std::size_t* above) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  std::size_t w = 0, a = 0, j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    a += __builtin_popcount(_mm256_movemask_ps(_mm256_cmp_ps(v, vhi, _CMP_GT_OQ)));
    const int m = _mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(v, vlo, _CMP_GE_OQ), _mm256_cmp_ps(v, vhi, _CMP_LE_OQ)));
    const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPack.idx[m]));
    _mm256_storeu_ps(out + w, _mm256_permutevar8x32_ps(v, p));
    w += __builtin_popcount(m);
  }
  for (; j < n; ++j) {
    const float v = x[j];
    a += v > hi;
    if (v >= lo && v <= hi) out[w++] = v;
  }
  *above = a;
  return w;
}

LAMINA_AVX2 std::size_t positions_avx2(const float* x, std::size_t n, float t, bool ge,
                                       int64_t base, int64_t* out) {
  const __m256 vt = _mm256_set1_ps(t);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i vbase = _mm256_set1_epi64x(base);
  std::size_t w = 0, j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const int m = _mm256_movemask_ps(ge ? _mm256_cmp_ps(v, vt, _CMP_GE_OQ)
                                        : _mm256_cmp_ps(v, vt, _CMP_GT_OQ));
    if (m == 0) continue;
    const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPack.idx[m]));
    const __m256i pos = _mm256_permutevar8x32_epi32(
        _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int>(j))), p);
    const __m256i lo4 = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(pos)), vbase);
    const __m256i hi4 =
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(pos, 1)), vbase);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + w), lo4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + w + 4), hi4);
    w += __builtin_popcount(m);
  }
  for (; j < n; ++j)
    if (ge ? x[j] >= t : x[j] > t) out[w++] = base + static_cast<int64_t>(j);
  return w;
}

LAMINA_AVX2 std::size_t nth_equal_avx2(const float* x, std::size_t n, float t, std::size_t m) {
  const __m256 vt = _mm256_set1_ps(t);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    unsigned mk = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), vt, _CMP_EQ_OQ)));
    const std::size_t c = __builtin_popcount(mk);
    if (c < m) {
      m -= c;
      continue;
    }
    for (;; mk &= mk - 1)
      if (--m == 0) return j + __builtin_ctz(mk);
  }
  return j + nth_equal_scalar(x + j, n - j, t, m);
}

LAMINA_AVX2 std::size_t collect_avx2(const float* x, std::size_t n, float lo, float* vals,
                                     int32_t* pos) {
  const __m256 vlo = _mm256_set1_ps(lo);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  std::size_t w = 0, j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(v, vlo, _CMP_GE_OQ));
    if (m == 0) continue;
    const __m256i p = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPack.idx[m]));
    _mm256_storeu_ps(vals + w, _mm256_permutevar8x32_ps(v, p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pos + w),
                        _mm256_permutevar8x32_epi32(
                            _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int>(j))), p));
    w += __builtin_popcount(m);
  }
  for (; j < n; ++j)
    if (x[j] >= lo) {
      vals[w] = x[j];
      pos[w++] = static_cast<int32_t>(j);
    }
  return w;
}

const RowKernels kAvx2{"avx2", count_avx2, band_avx2, positions_avx2, nth_equal_avx2,
                       collect_avx2};

// ------------------------------------------------------------------------------- AVX-512F
#define LAMINA_AVX512 __attribute__((target("avx512f,avx2,popcnt")))

LAMINA_AVX512 void count_avx512(const float* x, std::size_t n, float t, std::size_t* gt,
                                std::size_t* eq) {
  const __m512 vt = _mm512_set1_ps(t);
  std::size_t g = 0, e = 0, j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    g += __builtin_popcount(_mm512_cmp_ps_mask(v, vt, _CMP_GT_OQ));
    e += __builtin_popcount(_mm512_cmp_ps_mask(v, vt, _CMP_EQ_OQ));
  }
  if (j < n) {
    const __mmask16 r = static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(r, x + j);
    g += __builtin_popcount(_mm512_mask_cmp_ps_mask(r, v, vt, _CMP_GT_OQ));
    e += __builtin_popcount(_mm512_mask_cmp_ps_mask(r, v, vt, _CMP_EQ_OQ));
  }
  *gt = g;
  *eq = e;
}

LAMINA_AVX512 std::size_t band_avx512(const float* x, std::size_t n, float lo, float hi,
                                      float* out, std::size_t* above) {
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  std::size_t w = 0, a = 0;
  for (std::size_t j = 0; j < n; j += 16) {
    const __mmask16 r = n - j >= 16 ? static_cast<__mmask16>(0xffff)
                                    : static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(r, x + j);
    a += __builtin_popcount(_mm512_mask_cmp_ps_mask(r, v, vhi, _CMP_GT_OQ));
    const __mmask16 m = _mm512_mask_cmp_ps_mask(_mm512_mask_cmp_ps_mask(r, v, vlo, _CMP_GE_OQ),
                                                v, vhi, _CMP_LE_OQ);
    // no early-out on m == 0: with a few percent of hits that branch mispredicts often
    _mm512_storeu_ps(out + w, _mm512_maskz_compress_ps(m, v));
    w += __builtin_popcount(m);
  }
  *above = a;
  return w;
}

LAMINA_AVX512 std::size_t positions_avx512(const float* x, std::size_t n, float t, bool ge,
                                           int64_t base, int64_t* out) {
  const __m512 vt = _mm512_set1_ps(t);
  const __m512i iota_lo = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i iota_hi = _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15);
  const int pred = ge ? _CMP_GE_OQ : _CMP_GT_OQ;
  std::size_t w = 0;
  for (std::size_t j = 0; j < n; j += 16) {
    const __mmask16 r = n - j >= 16 ? static_cast<__mmask16>(0xffff)
                                    : static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(r, x + j);
    const __mmask16 m = pred == _CMP_GE_OQ ? _mm512_mask_cmp_ps_mask(r, v, vt, _CMP_GE_OQ)
                                           : _mm512_mask_cmp_ps_mask(r, v, vt, _CMP_GT_OQ);
    if (m == 0) continue;
    const __m512i b = _mm512_set1_epi64(base + static_cast<int64_t>(j));
    const __mmask8 m0 = static_cast<__mmask8>(m & 0xff), m1 = static_cast<__mmask8>(m >> 8);
    _mm512_storeu_si512(out + w, _mm512_maskz_compress_epi64(m0, _mm512_add_epi64(b, iota_lo)));
    w += __builtin_popcount(m0);
    _mm512_storeu_si512(out + w, _mm512_maskz_compress_epi64(m1, _mm512_add_epi64(b, iota_hi)));
    w += __builtin_popcount(m1);
  }
  return w;
}

LAMINA_AVX512 std::size_t nth_equal_avx512(const float* x, std::size_t n, float t,
                                           std::size_t m) {
  const __m512 vt = _mm512_set1_ps(t);
  for (std::size_t j = 0; j < n; j += 16) {
    const __mmask16 r = n - j >= 16 ? static_cast<__mmask16>(0xffff)
                                    : static_cast<__mmask16>((1u << (n - j)) - 1u);
    unsigned mk = _mm512_mask_cmp_ps_mask(r, _mm512_maskz_loadu_ps(r, x + j), vt, _CMP_EQ_OQ);
    const std::size_t c = __builtin_popcount(mk);
    if (c < m) {
      m -= c;
      continue;
    }
    for (;; mk &= mk - 1)
      if (--m == 0) return j + __builtin_ctz(mk);
  }
  return n;
}

LAMINA_AVX512 std::size_t collect_avx512(const float* x, std::size_t n, float lo, float* vals,
                                         int32_t* pos) {
  const __m512 vlo = _mm512_set1_ps(lo);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  std::size_t w = 0;
  for (std::size_t j = 0; j < n; j += 16) {
    const __mmask16 r = n - j >= 16 ? static_cast<__mmask16>(0xffff)
                                    : static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(r, x + j);
    const __mmask16 m = _mm512_mask_cmp_ps_mask(r, v, vlo, _CMP_GE_OQ);
    // no early-out on m == 0 (mispredicts with a few percent of hits), as in band_avx512
    _mm512_storeu_ps(vals + w, _mm512_maskz_compress_ps(m, v));
    _mm512_storeu_si512(pos + w, _mm512_maskz_compress_epi32(
                                     m, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(j)))));
    w += __builtin_popcount(m);
  }
  return w;
}

const RowKernels kAvx512{"avx512", count_avx512, band_avx512, positions_avx512,
                         nth_equal_avx512, collect_avx512};
#endif  // LAMINA_ISA_TARGETS

const RowKernels& scalar_table() { return kScalar; }
#if defined(LAMINA_ISA_TARGETS)
const RowKernels& avx2_table() { return kAvx2; }
const RowKernels& avx512_table() { return kAvx512; }
#endif
constexpr isa::Family<RowKernels> kRows{&scalar_table, LAMINA_ISA_TARGET_X86(&avx2_table),
                                        LAMINA_ISA_TARGET_X86(&avx512_table)};

isa::Selector g_selector;

}  // namespace

const isa::Selector& selector() { return g_selector; }

const RowKernels& row_kernels() { return kRows.get(g_selector); }

void set_row_isa(const std::string& isa) { g_selector.force(isa); }

const char* row_isa() { return row_kernels().isa; }

}  // namespace lamina::kv::detail

namespace lamina::kv {
const char* selection_isa() { return detail::row_isa(); }
void set_selection_isa(const std::string& isa) { detail::set_row_isa(isa); }
}  // namespace lamina::kv
