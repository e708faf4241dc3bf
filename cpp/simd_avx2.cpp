// AVX2 + FMA + F16C path (compiled with -mavx2 -mfma -mf16c; used only when the CPU has them):
// the sixteen lanes of the shared summation order (dot_kernels.inc) as two ymm registers.
#include <immintrin.h>

#include <cmath>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::avx2_isa {
struct V16 {
  __m256 lo, hi;  // lanes 0..7, 8..15
};
#define LAMINA_MR 1
#define LAMINA_NQ 6
#define LAMINA_MR1 4
#define LAMINA_ISA_NAME "avx2"
static inline V16 v16_zero() { return V16{_mm256_setzero_ps(), _mm256_setzero_ps()}; }
using VecH = __m256;
constexpr int kHalves = 2;
static inline VecH& half(V16& v, int h) { return h ? v.hi : v.lo; }
static inline VecH hload(const float* p) { return _mm256_loadu_ps(p); }
static inline VecH hload(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline VecH hfma(VecH a, VecH b, VecH c) { return _mm256_fmadd_ps(a, b, c); }
// Per 128-bit lane k of four vectors: [t_k(a), t_k(b), t_k(c), t_k(d)] with
// t_k = (x[4k] + x[4k+2]) + (x[4k+1] + x[4k+3]).
static inline __m256 quads(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
  __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  return _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
}
static inline void v16_reduce4(const V16& a, const V16& b, const V16& c, const V16& d, float* o) {
  // [t0 | t1] + [t2 | t3], then the two halves: (t0 + t2) + (t1 + t3)
  __m256 s8 = _mm256_add_ps(quads(a.lo, b.lo, c.lo, d.lo), quads(a.hi, b.hi, c.hi, d.hi));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  _mm_storeu_ps(o, s);
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx2_isa
