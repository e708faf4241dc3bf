// Model runtime hot loops, AVX2 + FMA + F16C path (per-file flags; used only when the CPU has
// them). See lamina/model_isa.hpp.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa::avx2_isa {
using VecF = __m256;
#define LAMINA_MW 8
#define LAMINA_MNV 2
#define LAMINA_MMR 6
#define LAMINA_MKR 2
#define LAMINA_MISA_NAME "avx2"
static inline VecF vzero() { return _mm256_setzero_ps(); }
static inline VecF vset1(float a) { return _mm256_set1_ps(a); }
static inline VecF vload(const float* p) { return _mm256_loadu_ps(p); }
static inline VecF vloadh(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static inline void vstore(float* p, VecF v) { _mm256_storeu_ps(p, v); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VecF vmul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
static inline VecF vadd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
static inline float vhsum(VecF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then [a, b, c, d]; then add the halves.
  __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
  __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  __m256 abcd = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
  _mm_storeu_ps(o, s);
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
#define LAMINA_OWN_Q8  // gemv_q8, gemm_q8 and quantise are defined below
#include "model_kernels.inc"
#include "model_gemv_avx2.inc"
static void gemv_q8(QType type, const uint8_t* w, std::size_t K, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t r0,
                    std::size_t r1, float* y) {
  gemv_q8_avx2(type, w, K, xq, xd, xsum, xqs, r0, r1, y);
}
static void gemm_q8(QType type, const uint8_t* w, std::size_t K, std::size_t g, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t T,
                    float* C, std::size_t ldc) {
  gemm_q8_avx2(type, w, K, g, xq, xd, xsum, xqs, T, C, ldc);
}
}  // namespace lamina::model::misa::avx2_isa
