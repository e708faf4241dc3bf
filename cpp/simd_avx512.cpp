// AVX-512F path (compiled with -mavx512f -mfma -mf16c; used only when the CPU has AVX-512F).
#include <immintrin.h>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::avx512_isa {
using VecF = __m512;
#define LAMINA_W 16
#define LAMINA_MR 4
#define LAMINA_ISA_NAME "avx512"
static inline VecF vzero() { return _mm512_setzero_ps(); }
static inline VecF vload(const float* p) { return _mm512_loadu_ps(p); }
static inline VecF vload(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vhsum(VecF v) { return _mm512_reduce_add_ps(v); }
#define LAMINA_NQ 6
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then [a, b, c, d]; then add the 4 lanes.
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
