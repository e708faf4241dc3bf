// cuda/kernels.hpp — CUDA versions of the memory kernels of lamina/heat.hpp,
// lamina/blend.hpp, lamina/gating.hpp and lamina/evict.hpp (host launcher API, no CUDA headers).
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

/// Eq. 7 with the entropy bound (lamina/gating.hpp): relevance b x L, gamma b x L, beta_used
/// b (float64), beta a scalar or per row (length b). One thread per row evaluates
/// kmath::softmax_row (the per-element steps of the CPU tile kernel, same order), and a row
/// over ε doubles its β exactly as the CPU does, so gamma and beta_used equal the CPU's bit for
/// bit. Parameters are checked before the launch (per-row β on the device, one flag read);
/// NaN/Inf in relevance raises ValueError naming the first bad row after the pass.
void softmax_gate(const float* relevance, std::size_t b, std::size_t L, const DeviceParam& beta,
                  bool has_max_entropy, double max_entropy, int max_doublings, float* gamma,
                  double* beta_used, void* stream);

/// Promotion candidates (lamina/heat.hpp select_hot): writes the indices i with
/// heat[i] > threshold (the float64 threshold honoured exactly, as on the CPU) to out (device,
/// room for n entries), ascending, or with `namespaces` (device uint64, length n) grouped by
/// namespace ascending, indices ascending within each; returns how many. Synchronises the
/// stream once for the count. ValueError: NaN threshold, NaN/Inf heat (first bad index).
std::size_t select_hot(const float* heat, std::size_t n, double threshold,
                       const uint64_t* namespaces, int64_t* out, void* stream);

/// Capacity projection Π_C (lamina/evict.hpp): same contract and tie rule
/// (kmath::evict_before: lower score first, among equal scores the larger index first).
/// scores, namespaces, live (optional, uint8) are device arrays of length n < 2^32; the
/// capacity mapping (cap_keys, cap_values, n_caps) is in host memory. Writes the evicted
/// indices ascending to out (device, room for n entries) and returns how many.
std::size_t evict_to_capacity(const float* scores, const uint64_t* namespaces, std::size_t n,
                              const uint8_t* live, int64_t default_capacity,
                              const uint64_t* cap_keys, const int64_t* cap_values,
                              std::size_t n_caps, int64_t* out, void* stream);

}  // namespace lamina::cuda
