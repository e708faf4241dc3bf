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
#include "dot_kernels.inc"
}  // namespace lamina::simd::scalar_isa
