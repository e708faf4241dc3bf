// Model runtime hot loops, AVX-512F path (per-file flags; used only when the CPU has it).
// See lamina/model_isa.hpp.
#include <immintrin.h>

#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa::avx512_isa {
using VecF = __m512;
#define LAMINA_MW 16
#define LAMINA_MNV 2
#define LAMINA_MMR 8
#define LAMINA_MISA_NAME "avx512"
static inline VecF vzero() { return _mm512_setzero_ps(); }
static inline VecF vset1(float a) { return _mm512_set1_ps(a); }
static inline VecF vload(const float* p) { return _mm512_loadu_ps(p); }
static inline VecF vloadh(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static inline void vstore(float* p, VecF v) { _mm512_storeu_ps(p, v); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
static inline float vhsum(VecF v) { return _mm512_reduce_add_ps(v); }
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
#include "model_kernels.inc"
}  // namespace lamina::model::misa::avx512_isa
