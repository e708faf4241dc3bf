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
#include "dot_kernels.inc"
}  // namespace lamina::simd::avx512_isa
