// Portable fallback: one float lane; the compiler may still auto-vectorise with SSE2.
#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd::scalar_isa {
using VecF = float;
#define LAMINA_W 1
#define LAMINA_MR 4
#define LAMINA_ISA_NAME "scalar"
static inline VecF vzero() { return 0.0f; }
static inline VecF vload(const float* p) { return *p; }
static inline VecF vload(const uint16_t* p) { return ::lamina::half_to_float(*p); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return a * b + c; }
static inline float vhsum(VecF v) { return v; }
#define LAMINA_NQ 4
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  o[0] = a; o[1] = b; o[2] = c; o[3] = d;
}
#include "dot_kernels.inc"
}  // namespace lamina::simd::scalar_isa
