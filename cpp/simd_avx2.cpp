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
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx2_isa
