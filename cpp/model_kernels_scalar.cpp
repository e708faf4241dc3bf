// Model runtime hot loops, portable path (one float lane; the compiler may still
// auto-vectorise with SSE2). See lamina/model_isa.hpp.
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa::scalar_isa {
using VecF = float;
#define LAMINA_MW 1
#define LAMINA_MNV 8
#define LAMINA_MMR 4
#define LAMINA_MISA_NAME "scalar"
static inline VecF vzero() { return 0.0f; }
static inline VecF vset1(float a) { return a; }
static inline VecF vload(const float* p) { return *p; }
static inline VecF vloadh(const uint16_t* p) { return ::lamina::half_to_float(*p); }
static inline void vstore(float* p, VecF v) { *p = v; }
static inline VecF vfma(VecF a, VecF b, VecF c) { return a * b + c; }
static inline VecF vadd(VecF a, VecF b) { return a + b; }
static inline float vhsum(VecF v) { return v; }
static inline void load_u4(const uint8_t* qs, VecF* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>(qs[j] & 15);
    out[j + 16] = static_cast<float>(qs[j] >> 4);
  }
}
static inline void load_i8(const int8_t* qs, VecF* out) {
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(qs[j]);
}
#include "model_kernels.inc"
}  // namespace lamina::model::misa::scalar_isa
