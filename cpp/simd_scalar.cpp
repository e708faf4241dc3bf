// Portable fallback: the sixteen lanes of the shared summation order (dot_kernels.inc) as an
// array, each multiply-add rounded once, so the scores have the AVX2/AVX-512 bits. On x86
// without FMA the fused multiply-add is emulated (fma1): about 6x slower than the unfused
// scalar loop it replaced, a price paid only on CPUs without AVX2 or under LAMINA_SIMD=scalar.
#include <cmath>
#include <cstring>

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
using VecH = V16;
constexpr int kHalves = 1;
static inline VecH& half(V16& v, int) { return v; }
static inline VecH hload(const float* p) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = p[l];
  return r;
}
static inline VecH hload(const uint16_t* p) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = ::lamina::half_to_float(p[l]);
  return r;
}
// a*b + c rounded once, without an FMA unit: a*b is exact in double and the double sum is
// rounded to float correctly unless it landed exactly on a float midpoint (the only case where
// rounding twice can differ from rounding once) or among float subnormals; those rare cases
// take std::fma (a library call on CPUs without FMA). (A double sum of 0 is an exact 0.)
static inline float fma1(float a, float b, float c) {
#ifdef FP_FAST_FMAF  // (the target has an FMA instruction: aarch64, or x86 built with -mfma)
  return std::fma(a, b, c);
#else
  const double s = static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c);
  uint64_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  const uint64_t mag = bits & 0x7fffffffffffffffull;
  const bool midpoint = (bits & 0x1fffffffull) == 0x10000000ull;
  const bool subnormal = mag != 0 && mag < 0x3810000000000000ull;  // 0 < |s| < FLT_MIN
  if (!(midpoint | subnormal)) return static_cast<float>(s);
  return std::fma(a, b, c);
#endif
}
static inline VecH hfma(const VecH& a, const VecH& b, const VecH& c) {
  V16 r;
  for (int l = 0; l < 16; ++l) r.v[l] = fma1(a.v[l], b.v[l], c.v[l]);
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
