#include "lamina/gating.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // sysconf
#endif

#include "lamina/common.hpp"
#include "lamina/kernel_isa.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {
constexpr std::size_t kRowsPerTask = 1024;
constexpr std::size_t kPlainTile = 64;  // rows per tile without the ε bound (see kGateTile)
// Calls whose outputs (γ and β_used) exceed stream_output_bytes() are written with
// non-temporal stores on the SIMD paths: outputs that cannot stay in the last-level cache
// would be written back to memory anyway, and streaming them saves the read-for-ownership of
// every output line (a third of the traffic for L = 3). Below half the last-level cache (the
// rule glibc's memcpy uses for its own non-temporal threshold) plain stores are faster --
// 1M rows x 3 layers, 20 MB of outputs: 1.9 ms instead of 2.4 ms on a Xeon with a 300 MB L3,
// equal at 4M rows -- and leave γ in cache for its reader. Never below kStreamOutputBytes.
// LAMINA_GATE_STREAM_BYTES (bytes, >= 0) overrides the threshold (tuning, tests).
constexpr std::size_t kStreamOutputBytes = std::size_t(8) << 20;

std::size_t stream_output_bytes() {
  static const std::size_t bytes = [] {
    if (const char* s = std::getenv("LAMINA_GATE_STREAM_BYTES")) {
      char* end = nullptr;
      const long long v = std::strtoll(s, &end, 10);
      if (end != s && *end == '\0' && v >= 0) return static_cast<std::size_t>(v);
    }
    std::size_t llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) llc = static_cast<std::size_t>(l3);
#endif
    return std::max(kStreamOutputBytes, llc / 2);
  }();
  return bytes;
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

  const bool doubling = has_max_entropy && max_doublings > 0;
  const std::size_t T = doubling ? kisa::kGateTile : kPlainTile;
  const std::size_t kTilesPerTask = kRowsPerTask / T;
  const bool stream = b * (L * sizeof(float) + sizeof(double)) >= stream_output_bytes();
  // Tiles of T rows on a grid shifted so that γ of every tile but the first starts on a
  // 64-byte boundary when some row within the first 16 does (streaming stores need it).
  std::size_t shift = 0;
  if (stream)
    for (std::size_t a0 = 1; a0 < 16; ++a0)
      if (reinterpret_cast<std::uintptr_t>(gamma) % 64 != 0 &&
          reinterpret_cast<std::uintptr_t>(gamma + a0 * L) % 64 == 0) {
        shift = T - a0;
        break;
      }
  const std::size_t n_tiles = (b + shift + T - 1) / T;
  const std::size_t n_tasks = (n_tiles + kTilesPerTask - 1) / kTilesPerTask;
  const int nt = threads_for(b * L, std::size_t(1) << 16, threads);
  const kisa::Table& K = kisa::table();
  kisa::GateJob job;
  job.relevance = relevance;
  job.b = b;
  job.L = L;
  job.beta = beta;
  // The ε bound: rows with H(γ) > ε are doubled inside the tile kernels (see kisa::GateJob).
  job.entropy = doubling;
  job.eps = static_cast<float>(max_entropy);
  job.max_doublings = max_doublings;
  job.gamma = gamma;
  job.beta_used = beta_used;
  job.stream = stream;
  std::atomic<std::size_t> first_bad{b};

  // per-worker scratch, sized once (not per task), uninitialised: the kernels write before
  // they read. L x kGateTile floats twice (portable loops), and with the ε bound on the SIMD
  // paths (L <= 4) the rounds' lists.
  const std::size_t workers = nt > 0 ? static_cast<std::size_t>(nt) : 1;
  std::unique_ptr<kisa::GateTile[]> tiles(new kisa::GateTile[workers]);
  const std::size_t re_floats = 2 * L * kisa::kGateTile;
  const std::size_t lv_floats =
      doubling && L <= 4 ? kisa::gate_levels_floats(L, std::min(T, b)) : 0;
  const std::size_t per_worker = re_floats + lv_floats;
  std::unique_ptr<float[]> scratch(new float[per_worker * workers]);
  for (std::size_t w = 0; w < workers; ++w) {
    float* p = scratch.get() + w * per_worker;
    tiles[w].r = p;
    tiles[w].e = p + L * kisa::kGateTile;
    tiles[w].lv = lv_floats ? p + re_floats : nullptr;
  }
  parallel_for(n_tasks, nt, [&](std::size_t task, int worker) {
    kisa::GateTile& B = tiles[worker];
    const std::size_t t_end = std::min(n_tiles, (task + 1) * kTilesPerTask);
    for (std::size_t t = task * kTilesPerTask; t < t_end; ++t) {
      const std::size_t i0 = t * T > shift ? t * T - shift : 0;
      const std::size_t nrows = std::min((t + 1) * T - shift, b) - i0;
      if (K.gate_tile(job, i0, nrows, B) == 0) continue;
      for (std::size_t i = 0; i < nrows; ++i)
        if (B.chk[i] != 0.0f) {  // NaN/Inf somewhere in this row
          std::size_t cur = first_bad.load();
          while (i0 + i < cur && !first_bad.compare_exchange_weak(cur, i0 + i)) {
          }
          break;
        }
    }
    if (stream) kisa::stream_fence();
  });

  if (const std::size_t i = first_bad.load(); i < b)
    throw ValueError(detail::concat("relevance[", i,
                                    "] contains NaN or Inf; pass finite relevances "
                                    "(check numpy.isfinite)"));
}

}  // namespace lamina
