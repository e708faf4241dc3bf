// Portable fallback: the sixteen lanes of the shared summation order (dot_kernels.inc) as an
// array, each multiply-add rounded once (std::fma), so the scores have the AVX2/AVX-512 bits.
#include <cmath>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::scalar_isa {
struct V16 {
  float v[16];
};
#define LAMINA_MR 4
#define LAMINA_NQ 4
#define LAMINA_MR1 8
#define LAMINA_ISA_NAME "scalar"
static inline V16 v16_zero() { return V16{}; }
static inline V16 v16_load(const float* p) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = p[l];
  return r;
}
static inline V16 v16_load(const uint16_t* p) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = ::lamina::half_to_float(p[l]);
  return r;
}
static inline V16 v16_fma(const V16& a, const V16& b, const V16& c) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
  return r;
}
static inline float v16_sum(const V16& a) {
  float t[4];
  for (int k = 0; k < 4; ++k) t[k] = (a.v[4 * k] + a.v[4 * k + 2]) + (a.v[4 * k + 1] + a.v[4 * k + 3]);
  return (t[0] + t[2]) + (t[1] + t[3]);
}
static inline void v16_reduce4(const V16& a, const V16& b, const V16& c, const V16& d, float* o) {
  o[0] = v16_sum(a);
  o[1] = v16_sum(b);
  o[2] = v16_sum(c);
  o[3] = v16_sum(d);
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::scalar_isa
