// Model runtime hot loops, AVX-512F path (per-file flags; used only when the CPU has it).
// See lamina/model_isa.hpp.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa::avx512_isa {
using VecF = __m512;
#define LAMINA_MW 16
#define LAMINA_MNV 2
#define LAMINA_MMR 8
#define LAMINA_MKR 4
#define LAMINA_MISA_NAME "avx512"
static inline VecF vzero() { return _mm512_setzero_ps(); }
static inline VecF vset1(float a) { return _mm512_set1_ps(a); }
static inline VecF vload(const float* p) { return _mm512_loadu_ps(p); }
static inline VecF vloadh(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline void vstore(float* p, VecF v) { _mm512_storeu_ps(p, v); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VecF vmul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
static inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
static inline float vhsum(VecF v) { return _mm512_reduce_add_ps(v); }
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
static inline void load_u4(const uint8_t* qs, VecF* out) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, m)));
  out[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), m)));
}
static inline void load_i8(const int8_t* qs, VecF* out) {
  out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))));
  out[1] = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16))));
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// 8-bit dot products on 256-bit integer lanes (AVX2; no AVX-512BW needed).
using VecA = __m256;
static inline VecA aset0() { return _mm256_setzero_ps(); }
static inline float ahsum(VecA v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline __m256i idot_u4(const uint8_t* qs, const int8_t* x) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                                     _mm256_set1_epi8(0x0F));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), _mm256_set1_epi16(1));
}
static inline __m256i idot_i8(const int8_t* q, const int8_t* x) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  // |w| · sign(x, w): unsigned × signed for maddubs
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w)),
                           _mm256_set1_epi16(1));
}
static inline VecA afma(float s, __m256i dot, VecA acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(dot), acc);
}
#include "model_kernels.inc"
}  // namespace lamina::model::misa::avx512_isa
