#include "lamina/gating.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

// Rows per tile: the tile is transposed to layer-major (L x kTile) so every inner loop runs
// over kTile consecutive rows with unit stride and vectorises, whatever L is.
constexpr std::size_t kTile = 64;
constexpr std::size_t kTilesPerTask = 16;

struct TileBuffers {
  std::vector<float> r, e;  // L x kTile each
  alignas(64) float beta[kTile], ref[kTile], sum[kTile], gz[kTile], chk[kTile], ent[kTile];
};

// γ and H(γ) for one tile of `nrows` <= kTile rows starting at row i0. The per-element steps
// and their order are those of kmath::softmax_row, so both give identical results.
void gate_tile(const float* rel, std::size_t L, std::size_t i0, std::size_t nrows,
               const RowParam& beta, float* gamma, TileBuffers& B) {
  float* R = B.r.data();
  float* E = B.e.data();
  for (std::size_t i = 0; i < kTile; ++i) {
    const bool real = i < nrows;
    B.beta[i] = real ? static_cast<float>(beta[i0 + i]) : 0.0f;
    for (std::size_t j = 0; j < L; ++j) R[j * kTile + i] = real ? rel[(i0 + i) * L + j] : 0.0f;
  }
  float mx[kTile], mn[kTile];
  for (std::size_t i = 0; i < kTile; ++i) {
    const float v = R[i];
    mx[i] = v;
    mn[i] = v;
    B.chk[i] = v - v;
  }
  for (std::size_t j = 1; j < L; ++j) {
    const float* Rj = R + j * kTile;
    for (std::size_t i = 0; i < kTile; ++i) {
      const float v = Rj[i];
      mx[i] = v > mx[i] ? v : mx[i];
      mn[i] = v < mn[i] ? v : mn[i];
      B.chk[i] += v - v;
    }
  }
  for (std::size_t i = 0; i < kTile; ++i) {
    B.ref[i] = kmath::gate_ref(mx[i], mn[i], B.beta[i]);
    B.sum[i] = 0.0f;
    B.gz[i] = 0.0f;
  }
  for (std::size_t j = 0; j < L; ++j) {
    const float* Rj = R + j * kTile;
    float* Ej = E + j * kTile;
    for (std::size_t i = 0; i < kTile; ++i) {
      const float e = kmath::fast_expf(kmath::gate_logit(Rj[i], B.ref[i], B.beta[i]));
      Ej[i] = e;
      B.sum[i] += e;
    }
  }
  for (std::size_t j = 0; j < L; ++j) {
    const float* Rj = R + j * kTile;
    float* Ej = E + j * kTile;
    for (std::size_t i = 0; i < kTile; ++i) {
      const float e = Ej[i];
      const float g = e / B.sum[i];
      Ej[i] = g;
      B.gz[i] += kmath::entropy_term(g, e, kmath::gate_logit(Rj[i], B.ref[i], B.beta[i]));
    }
  }
  for (std::size_t i = 0; i < kTile; ++i) B.ent[i] = kmath::gate_entropy(B.sum[i], B.gz[i]);
  for (std::size_t i = 0; i < nrows; ++i)
    for (std::size_t j = 0; j < L; ++j) gamma[(i0 + i) * L + j] = E[j * kTile + i];
}

}  // namespace

void softmax_gate(const float* relevance, std::size_t b, std::size_t L, const RowParam& beta,
                  bool has_max_entropy, double max_entropy, int max_doublings, float* gamma,
                  double* beta_used, int threads) {
  LAMINA_CHECK(L >= 1, "relevance must have at least one column (one per memory layer), got 0");
  const std::size_t nb = beta.per_row() ? b : 1;
  for (std::size_t i = 0; i < nb; ++i) {
    const double v = beta[i];
    LAMINA_CHECK(std::isfinite(v) && std::fabs(v) <= FLT_MAX, "beta",
                 beta.per_row() ? detail::concat("[", i, "]") : std::string(), " = ", v,
                 " is not a finite float32 value");
    LAMINA_CHECK(!has_max_entropy || v > 0.0, "beta",
                 beta.per_row() ? detail::concat("[", i, "]") : std::string(), " = ", v,
                 " must be > 0 when max_entropy is given (doubling beta sharpens the gate only "
                 "for beta > 0)");
  }
  if (has_max_entropy) {
    LAMINA_CHECK(std::isfinite(max_entropy) && max_entropy >= 0.0,
                 "max_entropy (epsilon) must be finite and >= 0, got ", max_entropy);
    LAMINA_CHECK(max_doublings >= 0 && max_doublings <= 1024,
                 "max_doublings must be in [0, 1024], got ", max_doublings);
  }
  if (b == 0) return;

  const float eps = static_cast<float>(max_entropy);
  const std::size_t n_tiles = (b + kTile - 1) / kTile;
  const std::size_t n_tasks = (n_tiles + kTilesPerTask - 1) / kTilesPerTask;
  const int nt = threads_for(b * L, std::size_t(1) << 16, threads);
  std::atomic<std::size_t> first_bad{b};

  parallel_for(n_tasks, nt, [&](std::size_t task, int) {
    TileBuffers B;
    B.r.resize(L * kTile);
    B.e.resize(L * kTile);
    const std::size_t t_end = std::min(n_tiles, (task + 1) * kTilesPerTask);
    for (std::size_t t = task * kTilesPerTask; t < t_end; ++t) {
      const std::size_t i0 = t * kTile, nrows = std::min(kTile, b - i0);
      gate_tile(relevance, L, i0, nrows, beta, gamma, B);
      for (std::size_t i = 0; i < nrows; ++i) {
        if (B.chk[i] != 0.0f) {  // NaN/Inf somewhere in this row
          std::size_t cur = first_bad.load();
          while (i0 + i < cur && !first_bad.compare_exchange_weak(cur, i0 + i)) {
          }
          continue;
        }
        int k = 0;
        if (has_max_entropy) {
          const float* r = relevance + (i0 + i) * L;
          float* g = gamma + (i0 + i) * L;
          float bcur = B.beta[i];
          float h = B.ent[i];
          for (; h > eps && k < max_doublings && bcur <= FLT_MAX / 2; ++k) {
            bcur *= 2.0f;
            h = kmath::softmax_row(r, static_cast<int>(L), bcur, g);
          }
        }
        beta_used[i0 + i] = std::ldexp(beta[i0 + i], k);  // the caller's β·2^k, exactly
      }
    }
  });

  if (const std::size_t i = first_bad.load(); i < b)
    throw ValueError(detail::concat("relevance[", i,
                                    "] contains NaN or Inf; pass finite relevances "
                                    "(check numpy.isfinite)"));
}

}  // namespace lamina
