// lamina/kernel_isa.hpp — internal to cpp/: the hot loops of the memory kernels (blend.cpp,
// gating.cpp, heat.cpp), compiled once per instruction set from cpp/kernel_loops.inc
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp, each with its own per-file flags)
// and chosen at run time: the same ISA as simd::kernels() (so LAMINA_SIMD caps it too).
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

/// Rows of the softmax gate are processed in tiles of kGateTile rows, transposed to
/// layer-major so every inner loop runs over the tile's rows with unit stride. On the SIMD
/// paths L = 2..4 skips the transpose: 16 (AVX-512) or 8 (AVX2) rows are de-interleaved into
/// one register per layer with lane permutes and evaluated in registers.
constexpr std::size_t kGateTile = 64;
struct GateJob {
  const float* relevance = nullptr;
  std::size_t b = 0, L = 0;
  RowParam beta;
  bool entropy = false;  // compute H(γ) and flag rows with H(γ) > eps
  float eps = 0.0f;
  float* gamma = nullptr;
  double* beta_used = nullptr;  // receives β per row (the driver overwrites doubled rows)
  // Write γ and β_used with non-temporal (streaming) stores where the SIMD paths can (large
  // outputs: saves the read-for-ownership traffic). The driver then calls stream_fence()
  // before its workers finish.
  bool stream = false;
};
/// Flags returned by gate_tile.
constexpr unsigned kGateNonFinite = 1u;  // some row has NaN/Inf (tile.chk[i] != 0)
constexpr unsigned kGateOverEps = 2u;    // some row has H(γ) > eps (tile.ent[i])
struct GateTile {
  std::vector<float> r, e;  // L x kGateTile each
  alignas(64) float beta[kGateTile];
  alignas(64) float chk[kGateTile];  // 0 when the row is finite
  alignas(64) float ent[kGateTile];  // H(γ) when job.entropy
  alignas(64) float ref[kGateTile], sum[kGateTile], gz[kGateTile];
};

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
  /// γ for rows [i0, i0 + nrows), nrows <= kGateTile, written to job.gamma, β to
  /// job.beta_used; per-row finiteness, entropy and float β left in `tile`. Returns
  /// kGateNonFinite | kGateOverEps flags (0: nothing left to do for this tile).
  unsigned (*gate_tile)(const GateJob& job, std::size_t i0, std::size_t nrows, GateTile& tile);
  /// γ and H(γ) (in tile.ent) of the listed rows (nrows <= kGateTile) at the β values already
  /// in tile.beta[0..nrows); γ is written back to those rows. One doubling round of the ε bound.
  void (*gate_rows)(const GateJob& job, const std::size_t* rows, std::size_t nrows,
                    GateTile& tile);
  /// Heat of rows [lo, hi); nonzero when a recency argument or a heat is not finite.
  unsigned (*heat_block)(const HeatJob& job, std::size_t lo, std::size_t hi);
};

/// The table for the ISA in use.
const Table& table();

/// Orders this thread's earlier non-temporal stores before its later stores (SFENCE on x86;
/// nothing elsewhere).
void stream_fence();

}  // namespace lamina::kisa
