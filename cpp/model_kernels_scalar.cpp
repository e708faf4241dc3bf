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
static inline void load_u4(const uint8_t* qs, VecF* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>(qs[j] & 15);
    out[j + 16] = static_cast<float>(qs[j] >> 4);
  }
}
static inline void load_i8(const int8_t* qs, VecF* out) {
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(qs[j]);
}
static inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return ::lamina::half_to_float(h);
}
using VecA = float;
static inline VecA aset0() { return 0.0f; }
static inline float ahsum(VecA a) { return a; }
static inline VecA afma(float s, int32_t dot, VecA acc) { return acc + s * static_cast<float>(dot); }
static inline int32_t idot_u4(const uint8_t* qs, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) s += (qs[j] & 15) * x[j] + (qs[j] >> 4) * x[j + 16];
  return s;
}
static inline int32_t idot_i8(const int8_t* q, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] * x[j];
  return s;
}
#include "model_kernels.inc"
}  // namespace lamina::model::misa::scalar_isa
