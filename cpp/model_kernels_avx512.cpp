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
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
#define LAMINA_OWN_GEMV_Q8
static void gemv_q8(QType type, const uint8_t* w, std::size_t K, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t r0,
                    std::size_t r1, float* y);
#include "model_kernels.inc"
#include "model_gemv_avx2.inc"

// The packed GEMV with AVX-512 VNNI: a group's 16 rows are the 16 int32 lanes of one vector,
// one vpdpbusd per 4 columns (unsigned nibbles × signed activations; Q8_0 as |w| × sign(x, w)).
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c"))) static void vnni_group(
    QType type, const uint8_t* w, std::size_t nb, std::size_t g, const int8_t* xq,
    const float* xd, const float* xsum, const int32_t* xqs, float* out) {
  const std::size_t gb = packed_block_bytes(type);
  const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  __m512 acc = _mm512_setzero_ps();
  for (std::size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + (g * nb + b) * gb;
    const int8_t* x = xq + 32 * b;
    int32_t xi[8];
    std::memcpy(xi, x, 32);
    __m512i s = zero;
    if (type == QType::Q8_0) {
      for (int j = 0; j < 8; ++j) {
        const __m512i q = _mm512_loadu_si512(blk + 32 + 64 * j);
        const __m512i xb = _mm512_set1_epi32(xi[j]);
        s = _mm512_dpbusd_epi32(s, _mm512_abs_epi8(q),
                                _mm512_mask_sub_epi8(xb, _mm512_movepi8_mask(q), zero, xb));
      }
    } else {
      const uint8_t* qs = blk + (type == QType::Q4_1 ? 64 : 32);
      for (int j = 0; j < 4; ++j) {
        const __m512i q = _mm512_loadu_si512(qs + 64 * j);
        s = _mm512_dpbusd_epi32(s, _mm512_and_si512(q, nib), _mm512_set1_epi32(xi[j]));
        s = _mm512_dpbusd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(q, 4), nib),
                                _mm512_set1_epi32(xi[4 + j]));
      }
      if (type == QType::Q4_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * xqs[b]));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(xd[b])), acc);
    if (type == QType::Q4_1) {
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      acc = _mm512_fmadd_ps(m, _mm512_set1_ps(xsum[b]), acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

static void gemv_q8(QType type, const uint8_t* w, std::size_t K, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t r0,
                    std::size_t r1, float* y) {
  static const bool vnni = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  if (vnni) {
    for_groups(r0, r1, y, [&](std::size_t g, float* out) {
      vnni_group(type, w, K / 32, g, xq, xd, xsum, xqs, out);
    });
    return;
  }
  gemv_q8_avx2(type, w, K, xq, xd, xsum, xqs, r0, r1, y);
}
}  // namespace lamina::model::misa::avx512_isa
