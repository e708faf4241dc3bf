// AVX-512F path (compiled with -mavx512f -mfma -mf16c; used only when the CPU has AVX-512F):
// the sixteen lanes of the shared summation order (dot_kernels.inc) as one zmm register.
#include <immintrin.h>

#include <cmath>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::avx512_isa {
using V16 = __m512;
#define LAMINA_MR 4
#define LAMINA_NQ 6
#define LAMINA_MR1 8
#define LAMINA_ISA_NAME "avx512"
static inline V16 v16_zero() { return _mm512_setzero_ps(); }
using VecH = __m512;
constexpr int kHalves = 1;
static inline VecH& half(V16& v, int) { return v; }
static inline VecH hload(const float* p) { return _mm512_loadu_ps(p); }
static inline VecH hload(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline VecH hfma(VecH a, VecH b, VecH c) { return _mm512_fmadd_ps(a, b, c); }
static inline void v16_reduce4(V16 a, V16 b, V16 c, V16 d, float* o) {
  // Per 128-bit lane k: [t_k(a), t_k(b), t_k(c), t_k(d)] with
  // t_k = (x[4k] + x[4k+2]) + (x[4k+1] + x[4k+3]); then (t0 + t2) + (t1 + t3).
  __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  __m256 lo = _mm512_castps512_ps256(abcd);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  _mm_storeu_ps(o, s);
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx512_isa
