// Model runtime hot loops, portable path (one float lane; the compiler may still
// auto-vectorise with SSE2). See lamina/model_isa.hpp.
#include <algorithm>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa::scalar_isa {
using VecF = float;
#define LAMINA_MW 1
#define LAMINA_MNV 8
#define LAMINA_MMR 4
#define LAMINA_MKR 4
#define LAMINA_MISA_NAME "scalar"
static inline VecF vzero() { return 0.0f; }
static inline VecF vset1(float a) { return a; }
static inline VecF vload(const float* p) { return *p; }
static inline VecF vloadh(const uint16_t* p) { return ::lamina::half_to_float(*p); }
static inline void vstore(float* p, VecF v) { *p = v; }
static inline VecF vfma(VecF a, VecF b, VecF c) { return a * b + c; }
static inline VecF vmul(VecF a, VecF b) { return a * b; }
static inline VecF vadd(VecF a, VecF b) { return a + b; }
static inline float vhsum(VecF v) { return v; }
static inline void vreduce4(VecF a, VecF b, VecF c, VecF d, float* o) {
  o[0] = a;
  o[1] = b;
  o[2] = c;
  o[3] = d;
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return ::lamina::half_to_float(h);
}
#include "model_kernels.inc"
}  // namespace lamina::model::misa::scalar_isa
