// cuda/gate_row.cuh — internal to cuda/*.cu: one row of the softmax gate with the entropy
// bound (lamina/gating.hpp), shared by softmax_gate (kernels.cu) and the fleet step (fleet.cu).
// Include only from files compiled with -fmad=false (CMakeLists.txt), so that the row rounds
// as on the CPU.
#pragma once

#include <cfloat>
#include <cmath>

#include "lamina/kernel_math.hpp"

namespace lamina::cuda::detail {

/// γ of one row of L relevances at β = bd (the CPU tile kernel's steps, kmath::softmax_row, in
/// the same order), doubling β while H(γ) > eps when `entropy` is set, as the CPU does; returns
/// the β used (bd · 2^k exactly), or NaN without writing γ when a relevance is NaN/Inf.
__device__ __forceinline__ double gate_row(const float* r, int L, double bd, bool entropy,
                                           float eps, int max_doublings, float* g) {
  bool finite = true;
  for (int j = 0; j < L; ++j) finite = finite && kmath::is_finite(r[j]);
  if (!finite) return __longlong_as_double(0x7ff8000000000000ll);
  float h = kmath::softmax_row(r, L, static_cast<float>(bd), g);
  if (!entropy || !(h > eps)) return bd;
  float bcur = static_cast<float>(bd);
  int k = 0;
  for (; h > eps && k < max_doublings && bcur <= FLT_MAX / 2; ++k) {
    bcur *= 2.0f;
    h = kmath::softmax_row(r, L, bcur, g);
  }
  return ldexp(bd, k);
}

}  // namespace lamina::cuda::detail
