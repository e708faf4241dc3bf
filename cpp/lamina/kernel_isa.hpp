// lamina/kernel_isa.hpp — internal to cpp/: the hot loops of the memory kernels (blend.cpp,
// gating.cpp, heat.cpp), compiled once per instruction set from cpp/kernel_loops.inc
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp, each with its own per-file flags)
// and chosen at run time by lamina/isa.hpp's rule (a Family of Tables, kernels_dispatch.cpp):
// the same ISA as the dot kernels, so LAMINA_SIMD caps it too.
// All variants are built with -ffp-contract=off and compute the same per-element operations
// in the same order (kernel_math.hpp), so their results are bit-identical. One exception to
// "one set of flags per file": on the AVX-512 path the heat loop is also compiled with
// AVX-512DQ (a function-level target attribute: int64 -> double conversions in one
// instruction) and used when the CPU reports DQ (every AVX-512 Xeon; not Xeon Phi).
//
// The drivers in blend.cpp / gating.cpp / heat.cpp validate arguments, split work with
// parallel_for and report errors; the functions here only loop. Pure functions of their
// arguments; reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lamina/heat.hpp"
#include "lamina/row_param.hpp"

namespace lamina::kisa {

/// Rows of one ema_blend / damped_update call.
struct BlendJob {
  float* rows = nullptr;
  std::size_t d = 0;
  const float* targets = nullptr;
  const int64_t* index = nullptr;  // null: row k <- targets row k
  RowParam param;                  // α (EMA) or λ (damped), per updated row or scalar
  bool damped = false;
  bool renormalize = false;        // EMA only
  float* drift = nullptr;
};
/// Rows skipped because an input was NaN/Inf: how many, and the first (as an update number k).
/// (Trivial aggregate: no constructor may be emitted from an ISA-specific translation unit.)
struct BadRows {
  std::size_t count;
  std::size_t first;
};

/// Rows of the softmax gate are processed in tiles of at most kGateTile rows (the driver uses
/// 64 without the ε bound, where small tiles are faster, and 1024 with it, where long lists of
/// rows to double keep the vectors full). The portable loops
/// transpose a tile to layer-major so every inner loop runs over the tile's rows with unit
/// stride; on the SIMD paths L = 2..4 skips the transpose: 16 (AVX-512) or 8 (AVX2) rows are
/// de-interleaved into one register per layer with lane permutes and evaluated in registers.
constexpr std::size_t kGateTile = 1024;
/// The ε bound's doubling rounds of a tile on the SIMD paths (L = 2..4): rows still over ε
/// after round r are compacted (in order) into the list of round r + 1, evaluated a full
/// vector at a time, and their results expanded back on the way up. Rounds past kGateLevels
/// (rare: rows whose entropy needs more than 2^12·β) iterate in registers instead.
constexpr int kGateLevels = 12;
/// The ε bound's predictor for L = 2 and 3 (SIMD paths; tables built per ε by the driver,
/// gating.cpp; kernel in gate_predict.inc, gate_tile_pred_v). A row's logits at β are
/// z = β·(r − r_max) <= 0; x1 <= x2 are the gaps −z of the layers other than the maximum
/// (L = 2: x1 only, x2 = ∞). Doubling β k times scales them by exactly 2^k (while x1 is a
/// normal float), and the exact entropy of the logits (0, −u, −u/q), u = 2^k·x1, q = x1/x2, is
/// F(u, q): decreasing in u, increasing in q (the smallest probability's logit rises). With
/// δ = kGatePredSlack, a bound on the float kernel's entropy error (|H_float − H_exact| is
/// below 2e-6 for L <= 3 by error analysis of its ~2 ulp exps and log and one division; at
/// most 2.1e-7 measured over 4·10^7 random rows), per cell i of q (the computed
/// q in [i/64, (i+1)/64), widened by the reciprocal's error):
///   lo[i] <= the u with F(u, q) = ε + δ for every q of the cell: 2^k·x1 <= lo proves the
///          kernel's H at k doublings is > ε, so the rounds before the first k without that
///          proof (k_a, capped by max_doublings and the FLT_MAX/2 bound) all double;
///   hi[i] >= the u with F(u, q) = ε − δ for every q of the cell: 2^k·x1 >= hi proves H <= ε,
///          so the row stops at k_a; rows without that proof (about 1%) go through the exact
///          rounds from k_a with their entropy computed.
/// Ties at the maximum (x1 = 0) have H >= ln 2 at every β: `ties_over` says ε + δ < ln 2, so
/// they start at the cap. Rows the proof does not cover (NaN/Inf, subnormal gaps) start at 0.
constexpr int kGatePredCells = 64;
constexpr double kGatePredSlack = 1e-4;
struct GatePredictor {
  // −2·lo and −hi per cell, widened by the reciprocal's error (Table::rcp_error): negated
  // because the kernel multiplies them by rcp(−x1); 2·lo so that floor(log2(2·lo/x1)) is k_a.
  alignas(64) float nlo[kGatePredCells];
  alignas(64) float nhi[kGatePredCells];
  bool ties_over = false;
};
struct GateJob {
  const float* relevance = nullptr;
  std::size_t b = 0, L = 0;
  RowParam beta;
  bool entropy = false;  // apply the ε bound (doubling β while H(γ) > eps), max_doublings > 0
  float eps = 0.0f;
  int max_doublings = 0;
  // The ε bound's predictor (L = 2, 3 on the SIMD paths; see GatePredictor), or null: every
  // row then starts its doublings at k = 0.
  const GatePredictor* pred = nullptr;
  float* gamma = nullptr;
  double* beta_used = nullptr;  // receives β·2^k per row
  // Write γ and β_used with non-temporal (streaming) stores where the SIMD paths can (large
  // outputs: saves the read-for-ownership traffic). The driver then calls stream_fence()
  // before its workers finish.
  bool stream = false;
};
/// Flag returned by gate_tile: some row has NaN/Inf (tile.chk[i] != 0).
constexpr unsigned kGateNonFinite = 1u;
/// Per-worker scratch of the gate; the pointers are owned by the driver and need no
/// initialisation. `r`, `e`: L x kGateTile floats each (portable loops, layer stride
/// kGateTile). `lv`: the doubling rounds' lists on the SIMD paths, gate_levels_floats(L, rows)
/// floats, and at least gate_list_floats() with the predictor.
struct GateTile {
  float* r = nullptr;
  float* e = nullptr;
  float* lv = nullptr;
  alignas(64) float beta[kGateTile];
  alignas(64) float chk[kGateTile];  // 0 when the row is finite
  alignas(64) float ent[kGateTile];  // H(γ) when job.entropy
  alignas(64) float ref[kGateTile], sum[kGateTile], gz[kGateTile];
  alignas(64) float pbeta[kGateTile];  // portable doubling rounds: β, k and row per list entry
  int pk[kGateTile];
  std::size_t prow[kGateTile];
  uint32_t over[kGateLevels + 1][kGateTile / 8];  // SIMD rounds: lanes passed on, per vector
  // (the predictor's path: `ent` holds each row's k, over[0] each vector's rows to settle,
  // `prow` the vectors that have some)
  // The predictor's list of rows still to settle (in lv, see gate_list_stride): entries, and
  // the first row of the job its rows are counted from.
  std::size_t list_n = 0, list_base = 0;
};
/// Floats of GateTile::lv for tiles of up to `rows` rows (rows <= kGateTile) of L <= 4 layers:
/// levels 0..kGateLevels, each with L relevance, 1 β, L γ and 1 k columns of rows + 16 slots
/// (rounded up to whole vectors, plus one vector of slack for full-vector stores).
constexpr std::size_t gate_level_stride(std::size_t rows) { return (rows + 15) / 16 * 16 + 16; }
constexpr std::size_t gate_levels_floats(std::size_t L, std::size_t rows) {
  return (kGateLevels + 1) * (2 * L + 2) * gate_level_stride(rows);
}
/// The predictor's list (L = 2, 3; kept in GateTile::lv): capacity in rows, floats per column,
/// and floats in all (two buffers of 3 columns).
constexpr std::size_t kGateListCap = 4 * kGateTile;
constexpr std::size_t gate_list_stride() { return kGateListCap + 64; }
constexpr std::size_t gate_list_floats() { return 2 * 3 * gate_list_stride(); }

struct HeatJob {
  NumColumn visits, ilen;
  const double* last = nullptr;
  double now = 0.0, inv_mu = 0.0;
  float a = 0.0f, b = 0.0f, c = 0.0f;
  float* out = nullptr;
};

struct Table {
  const char* isa;
  /// Updates the job's rows k in [lo, hi); `backup` is scratch for one row (job.d floats).
  BadRows (*blend_rows)(const BlendJob& job, std::size_t lo, std::size_t hi, float* backup);
  /// γ for rows [i0, i0 + nrows), nrows <= kGateTile, written to job.gamma, β·2^k to
  /// job.beta_used (job.entropy: the ε bound resolved per row, as documented in gating.hpp);
  /// per-row finiteness left in tile.chk. Returns kGateNonFinite when some row has NaN/Inf.
  unsigned (*gate_tile)(const GateJob& job, std::size_t i0, std::size_t nrows, GateTile& tile);
  /// Settles the rows the predictor's path left on the worker's list (tile.list_n of them):
  /// called by the driver after each task's tiles when job.pred is set.
  void (*gate_flush)(const GateJob& job, GateTile& tile);
  /// Heat of rows [lo, hi); nonzero when a recency argument or a heat is not finite.
  unsigned (*heat_block)(const HeatJob& job, std::size_t lo, std::size_t hi);
  /// Relative error bound of the approximate reciprocal the gate's predictor uses (its
  /// tables widen their cells and bounds by it; 0 where the predictor is not used).
  double rcp_error;
};

/// The table for the ISA in use (isa::active()).
const Table& table();

/// Orders this thread's earlier non-temporal stores before its later stores (SFENCE on x86;
/// nothing elsewhere).
void stream_fence();

}  // namespace lamina::kisa
