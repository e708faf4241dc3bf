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
#include "reduce4_avx512.inc"
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  reduce4_avx512(a, b, c, d, o);
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
#define LAMINA_OWN_Q8  // gemv_q8, gemm_q8 and quantise are defined below
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

// The prefill's integer GEMM with VNNI: per block the group's weights are unpacked into
// registers once and multiplied with four tokens' activations (two dependency chains each).
template <int TY>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c"))) static void vnni_gemm(
    const uint8_t* w, std::size_t K, std::size_t g, const int8_t* xq, const float* xd,
    const float* xsum, const int32_t* xqs, std::size_t T, float* C, std::size_t ldc) {
  constexpr QType type = static_cast<QType>(TY);
  const std::size_t nb = K / 32, gb = packed_block_bytes(type);
  const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  constexpr std::size_t q0 = type == QType::Q4_1 ? 64 : 32;
  for (std::size_t t = 0; t < T; t += 4) {
    const std::size_t mt = std::min<std::size_t>(4, T - t);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (std::size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + (g * nb + b) * gb;
      __m512i wv[8];
      __mmask64 neg[8];
      if constexpr (type == QType::Q8_0) {
        for (int j = 0; j < 8; ++j) {
          const __m512i q = _mm512_loadu_si512(blk + 32 + 64 * j);
          wv[j] = _mm512_abs_epi8(q);
          neg[j] = _mm512_movepi8_mask(q);
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          const __m512i q = _mm512_loadu_si512(blk + q0 + 64 * j);
          wv[j] = _mm512_and_si512(q, nib);
          wv[4 + j] = _mm512_and_si512(_mm512_srli_epi16(q, 4), nib);
        }
      }
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
      for (std::size_t u = 0; u < mt; ++u) {
        const std::size_t row = t + u;
        int32_t xi[8];
        std::memcpy(xi, xq + row * K + 32 * b, 32);
        __m512i s0 = zero, s1 = zero;
        if constexpr (type == QType::Q8_0) {
          for (int j = 0; j < 8; j += 2) {
            const __m512i x0 = _mm512_set1_epi32(xi[j]), x1 = _mm512_set1_epi32(xi[j + 1]);
            s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_mask_sub_epi8(x0, neg[j], zero, x0));
            s1 = _mm512_dpbusd_epi32(s1, wv[j + 1], _mm512_mask_sub_epi8(x1, neg[j + 1], zero, x1));
          }
        } else {
          for (int j = 0; j < 4; ++j) {
            s0 = _mm512_dpbusd_epi32(s0, wv[j], _mm512_set1_epi32(xi[j]));
            s1 = _mm512_dpbusd_epi32(s1, wv[4 + j], _mm512_set1_epi32(xi[4 + j]));
          }
        }
        __m512i s = _mm512_add_epi32(s0, s1);
        if constexpr (type == QType::Q4_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * xqs[row * nb + b]));
        acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(xd[row * nb + b])), acc[u]);
        if constexpr (type == QType::Q4_1) {
          const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
          acc[u] = _mm512_fmadd_ps(m, _mm512_set1_ps(xsum[row * nb + b]), acc[u]);
        }
      }
    }
    for (std::size_t u = 0; u < mt; ++u) _mm512_storeu_ps(C + (t + u) * ldc, acc[u]);
  }
}

static bool has_vnni() {
  static const bool v = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return v;
}

static void gemm_q8(QType type, const uint8_t* w, std::size_t K, std::size_t g, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t T,
                    float* C, std::size_t ldc) {
  if (!has_vnni()) return gemm_q8_avx2(type, w, K, g, xq, xd, xsum, xqs, T, C, ldc);
  switch (type) {
    case QType::Q4_0: return vnni_gemm<static_cast<int>(QType::Q4_0)>(w, K, g, xq, xd, xsum, xqs, T, C, ldc);
    case QType::Q4_1: return vnni_gemm<static_cast<int>(QType::Q4_1)>(w, K, g, xq, xd, xsum, xqs, T, C, ldc);
    default: return vnni_gemm<static_cast<int>(QType::Q8_0)>(w, K, g, xq, xd, xsum, xqs, T, C, ldc);
  }
}

static void gemv_q8(QType type, const uint8_t* w, std::size_t K, const int8_t* xq,
                    const float* xd, const float* xsum, const int32_t* xqs, std::size_t r0,
                    std::size_t r1, float* y) {
  if (has_vnni()) {
    for_groups(r0, r1, y, [&](std::size_t g, float* out) {
      vnni_group(type, w, K / 32, g, xq, xd, xsum, xqs, out);
    });
    return;
  }
  gemv_q8_avx2(type, w, K, xq, xd, xsum, xqs, r0, r1, y);
}
}  // namespace lamina::model::misa::avx512_isa
