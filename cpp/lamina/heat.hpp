// lamina/heat.hpp — MemoryOS heat scores and the promotion selection (DESIGN.md §2 step 5;
// references/memory-algorithms.md §1.4).
//
// heat[i] = a·N_visit[i] + b·L_interaction[i] + c·exp(−(now − last_access[i]) / μ)
//
// MemoryOS calls the weights α, β, γ; lamina names them a, b, c so they do not clash with the
// α of eq. 5 and the β, γ of eq. 7. Defaults a = b = c = 1, μ = 1e7 s (the paper's values).
// Times are event times in seconds (float64; the difference is taken in float64, the
// exponential in float32 via kmath::fast_expf). last_access > now is allowed (Δt < 0 gives a
// recency above 1).
//
// Columns: visits and interaction_len are float32, int32 or int64 arrays, read in their own
// type (no conversion copies); last_access float64; output float32. All of length n.
//
// Errors (lamina::ValueError): now, a, b, c not finite; μ not finite or <= 0; NaN/Inf in
// last_access or in a float32 column, or a heat that overflows float32 (the output is then
// partly written). Threads: blocks of rows via parallel_for; reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lamina {

/// A read-only numeric column of n elements in one of the supported types.
struct NumColumn {
  enum class Kind : int { F32 = 0, I32 = 1, I64 = 2 };
  const void* data = nullptr;
  Kind kind = Kind::F32;
};

/// Writes heat[0..n) (see the formula above).
void heat_scores(NumColumn visits, NumColumn interaction_len, const double* last_access,
                 std::size_t n, double now, double a, double b, double c, double mu,
                 float* heat, int threads);

/// Promotion candidates: the indices i with heat[i] > threshold (strictly), ascending.
/// With `namespaces` (uint64, length n) the result is grouped by namespace — namespaces in
/// ascending numeric order, indices ascending within each namespace — so each namespace's
/// candidates form one contiguous run. ValueError: NaN/Inf in heat, NaN threshold.
std::vector<int64_t> select_hot(const float* heat, std::size_t n, double threshold,
                                const uint64_t* namespaces, int threads);

}  // namespace lamina
