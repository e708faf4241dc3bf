// AVX2 + FMA + F16C path (compiled with -mavx2 -mfma -mf16c; used only when the CPU has them).
#include <immintrin.h>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::avx2_isa {
using VecF = __m256;
#define LAMINA_W 8
#define LAMINA_MR 3
#define LAMINA_ISA_NAME "avx2"
static inline VecF vzero() { return _mm256_setzero_ps(); }
static inline VecF vload(const float* p) { return _mm256_loadu_ps(p); }
static inline VecF vload(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
static inline float vhsum(VecF v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}
#define LAMINA_NQ 4
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then [a, b, c, d]; then add the halves.
  __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
  __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  __m256 abcd = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
  _mm_storeu_ps(o, s);
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx2_isa
