// lamina/blend.hpp — in-place row updates of the memory loop: the EMA blend of eq. 5 and the
// closed-form retention-regularised (damped) update of eq. 9-10.
//
// Layout: `rows` is a row-major n x d float32 matrix updated in place; `targets` is m x d.
// Without an index, m == n and row i is updated from targets row i. With an index (int64,
// length m), rows[index[k]] is updated from targets row k — targets holds one row per index
// entry, not one per matrix row. Indices must be in [0, n) (IndexError) and unique (ValueError:
// two updates of one row would race and depend on the order).
//
// Each updated row is read and written once (one fused pass over memory: a finiteness check
// and, for renormalisation, the norm are taken on the row while it sits in L1, then the row is
// rewritten). drift[k] = ‖row_new − row_old‖² of the k-th updated row (float32 accumulation
// in 8 interleaved partial sums).
//
// Errors (lamina::ValueError / IndexError, thrown before anything is written unless noted):
// shape mismatches, α outside [0, 1] or λ < 0 or a non-finite parameter, out-of-range or
// duplicate indices, overlapping `rows`/`targets`/`drift` buffers. Non-finite values (NaN/Inf)
// in rows or targets are found during the pass: such rows are left unchanged, all other rows
// are updated, and a ValueError naming the first bad row is thrown at the end (the call is
// not atomic on that error).
//
// Threads: rows are split into blocks run by parallel_for (`threads` <= 0: default count;
// small inputs use one thread). Results do not depend on the thread count. The functions are
// reentrant; concurrent calls on overlapping rows are a data race (the caller serialises).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/row_param.hpp"

namespace lamina {

/// Eq. 5: rows[r] ← α·rows[r] + (1−α)·targets[k] for each updated row r (k-th entry), with α
/// scalar or per updated row (length m), α ∈ [0, 1]. With `renormalize`, each result row is
/// scaled to unit L2 norm (a row whose blend is exactly zero stays zero). drift: length m.
void ema_blend(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
               const int64_t* index, const RowParam& alpha, bool renormalize, float* drift,
               int threads);

/// Eq. 9-10 in closed form: rows[r] ← (targets[k] + λ·rows[r]) / (1 + λ), evaluated as the
/// convex combination (λ/(1+λ))·rows[r] + (1/(1+λ))·targets[k] (same value; no overflow for
/// large λ; λ = 0 copies the target exactly). λ >= 0 finite, scalar or per updated row.
/// drift[k] = ‖Δ‖², the 𝓛_ret summand of eq. 9.
void damped_update(float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const int64_t* index, const RowParam& lam, float* drift,
                   int threads);

}  // namespace lamina
