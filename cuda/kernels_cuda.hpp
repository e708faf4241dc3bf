// cuda/kernels_cuda.hpp — CUDA versions of the row kernels of lamina/heat.hpp and
// lamina/blend.hpp (host launcher API, no CUDA headers).
//
// Same contracts and the same per-element formulas (lamina/kernel_math.hpp, compiled with
// -fmad=false so heat is bit-identical to the CPU); the blend drift sums in a different order
// than the CPU's 8 partial sums (float32 rounding differences only). All pointers are device
// pointers of the current device; every call is stream-ordered on `stream` and synchronises it
// once to report errors as lamina::ValueError / IndexError like the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lamina::cuda {

/// Column element types (as NumColumn::Kind in lamina/heat.hpp).
enum class ColKind : int { F32 = 0, I32 = 1, I64 = 2 };

/// heat[i] = a·visits[i] + b·interaction_len[i] + c·exp(−(now − last_access[i])/μ).
void heat_scores(const void* visits, ColKind vk, const void* interaction_len, ColKind lk,
                 const double* last_access, std::size_t n, double now, double a, double b,
                 double c, double mu, float* heat, void* stream);

/// A scalar or a per-updated-row parameter (device float32 or float64 array).
struct DeviceParam {
  double scalar = 0.0;
  const float* f32 = nullptr;
  const double* f64 = nullptr;
};

/// Eq. 5 (renormalize optional) / eq. 9-10, in place on rows (n x d); targets m x d; index
/// (m, int64, optional); drift (m). Errors as lamina/blend.hpp: index range / duplicates and
/// parameter range are checked before anything is written; rows with NaN/Inf are left
/// unchanged (drift NaN) and reported after the pass.
void ema_blend(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
               const int64_t* index, const DeviceParam& alpha, bool renormalize, float* drift,
               void* stream);
void damped_update(float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const int64_t* index, const DeviceParam& lam, float* drift,
                   void* stream);

}  // namespace lamina::cuda
