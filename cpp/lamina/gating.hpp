// lamina/gating.hpp — the layer gate of eq. 7: γ = softmax(β·r) per query row, with the
// entropy bound of Algorithm 1 line 26 (H(γ) <= ε, reached by sharpening β).
//
// relevance: row-major b x L float32 (r_i = relevance of layer i to the query), finite.
// gamma:     row-major b x L float32 output, each row sums to 1 (up to rounding).
// beta_used: b float64 output, the β each row was finally evaluated with.
//
// Numerics: z_j = β·(r_j − r_ref), r_ref = max_j r_j (β >= 0) or min_j r_j (β < 0), so the
// largest logit is exactly 0 and exp never overflows; β = 0 gives the uniform gate 1/L.
// exp/log are lamina::kmath::fast_expf/fast_logf (~2 ulp); exp(z) below FLT_MIN is 0.
// Entropy H(γ) = −Σ γ_j ln γ_j in nats, computed as ln(Σ e^z) − Σ γ_j z_j.
//
// Entropy bound (has_max_entropy): for every row with H(γ) > ε, β is doubled and γ recomputed
// until H(γ) <= ε, at most `max_doublings` times, and never past |β| > FLT_MAX / 2 (β·2
// must stay finite). So β_used = β·2^k with 0 <= k <= max_doublings and the extra cost is at
// most max_doublings softmax evaluations of that row. H decreases monotonically towards
// ln(#tied maxima) as β grows, so a row whose top relevances tie (e.g. all equal) can never
// reach an ε below ln(#ties): it stops at the bound. Requires β > 0 for every row (doubling
// a zero or negative β cannot sharpen towards the most relevant layer) and ε finite, >= 0.
//
// Errors (lamina::ValueError): L == 0; β not finite or |β| > FLT_MAX; with the bound β <= 0,
// ε < 0 or not finite, max_doublings outside [0, 1024]; NaN/Inf in relevance (found during
// the pass: gamma is then partly written).
//
// Memory: when gamma and beta_used together exceed half the last-level cache (at least
// 8 MiB; environment variable LAMINA_GATE_STREAM_BYTES overrides the threshold), the SIMD
// paths write them with non-temporal (streaming) stores: they bypass the caches, so a caller
// that reads γ right after the call reads it from memory (outputs this large leave the caches
// anyway). Smaller outputs are written with plain stores and stay cached.
//
// Cost: one softmax (with its entropy) per row and per doubling. The doubling rounds run inside
// the row tiles: on the SIMD paths with L = 2..4 the rows of a tile still over ε are compacted
// into a list and re-evaluated a full vector at a time (so each doubling costs about one row
// evaluation, not a vector per row); other L double within the tile.
//
// Predictor (L = 2, 3 on the SIMD paths): a row whose entropy at β·2^k is proven to exceed ε
// (from its two logit gaps and a per-ε table of the exact entropy's level set, with a margin
// covering the float kernel's error; see kisa::GatePredictor) starts its doublings at the
// first k the proof does not cover, and stops there without computing its entropy when the
// table also proves H <= ε; the other rows (about 1%) take the exact rounds from there. So
// about one softmax per row is computed instead of one per round. Same results bit for bit:
// the skipped rounds would all have doubled.
// `predict`: -1 (default) uses it for calls of at least 256 rows (building the table costs
// about 20 µs per thread and ε, then it is cached), 0 never, 1 always (tests).
//
// Threads: row tiles of 1024 rows split by parallel_for (`threads` <= 0: default); results do
// not depend on the thread count, the ISA path (scalar / AVX2 / AVX-512) or the output
// alignment (bit for bit). Reentrant.
#pragma once

#include <cstddef>

#include "lamina/row_param.hpp"

namespace lamina {

/// Eq. 7 over b rows of L relevances. `beta`: scalar or per row (length b).
void softmax_gate(const float* relevance, std::size_t b, std::size_t L, const RowParam& beta,
                  bool has_max_entropy, double max_entropy, int max_doublings, float* gamma,
                  double* beta_used, int threads, int predict = -1);

/// softmax_gate's argument checks, shared by the CPU and CUDA versions (ValueError naming the
/// value): one β value (finite float32; > 0 when max_entropy is given), `row` naming it when β
/// is per row; then max_entropy (ε, finite and >= 0) and max_doublings (in [0, 1024]).
void check_gate_beta(double beta, bool per_row, std::size_t row, bool has_max_entropy);
void check_gate_entropy(double max_entropy, int max_doublings);

}  // namespace lamina
