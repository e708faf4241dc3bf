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
#include "reduce4_avx512.inc"
static inline void v16_reduce4(V16 a, V16 b, V16 c, V16 d, float* o) {
  reduce4_avx512(a, b, c, d, o);
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx512_isa
