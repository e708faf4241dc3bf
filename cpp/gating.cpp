#include "lamina/gating.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
constexpr std::size_t kPredictMinRows = 256;  // smaller calls skip building the predictor
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

// ---- the ε bound's predictor (kisa::GatePredictor) ------------------------------------------
// Exact entropy (double) of the logits (0, −u, −u/q), q in [0, 1] (q = 0: the third layer is
// absent, as for L = 2), and its derivative in u: the logits are t·w with w = (0, −1, −1/q) at
// t = u, and dH/dt = −t·Var(w) under γ.
struct EntropyAt {
  double h, dh;
};
EntropyAt entropy_at(double u, double q) {
  const double ea = std::exp(-u);
  const double w2 = q > 0.0 ? 1.0 / q : 0.0;
  const double eb = q > 0.0 ? std::exp(-u * w2) : 0.0;
  const double s = 1.0 + ea + eb;
  const double mean = -(ea + eb * w2) / s, sq = (ea + eb * w2 * w2) / s;
  return {std::log(s) + u * (ea + eb * w2) / s, -u * (sq - mean * mean)};
}

// The u > 0 at which the entropy of (0, −u, −u/q) equals e, bracketed: a lower (upper) bound
// within a relative 1e-9 of it, checked against entropy_at. 0 when the entropy never exceeds
// e (e >= ln 3, or ln 2 at q = 0); the upper bound is +Inf when e <= 0 (the entropy only
// tends to 0). Safeguarded Newton from `start` (at most the root).
double entropy_root(double q, double e, double start, bool upper) {
  if (e >= (q > 0.0 ? std::log(3.0) : std::log(2.0))) return 0.0;
  if (e <= 0.0) return upper ? HUGE_VAL : 0.0;
  double lo = 0.0, hi = std::max(1.0, 2.0 * start);
  while (entropy_at(hi, q).h > e) hi *= 2.0;  // H -> 0 as u grows, and e > 0
  double u = std::clamp(start, lo, hi);
  for (int it = 0; it < 200 && hi - lo > 1e-13 * hi; ++it) {
    const EntropyAt f = entropy_at(u, q);
    if (f.h > e) lo = u; else hi = u;
    double next = f.dh < 0.0 ? u - (f.h - e) / f.dh : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    u = next;
  }
  if (upper) {
    double r = u * (1.0 + 1e-9);
    while (entropy_at(r, q).h > e) r *= 1.0 + 1e-6;
    return r;
  }
  double r = u * (1.0 - 1e-9);
  while (r > 0.0 && entropy_at(r, q).h <= e) r *= 1.0 - 1e-6;
  return r;
}

// The predictor's tables for L = 2 or 3 at the kernel's float ε (see kisa::GatePredictor),
// for an ISA whose approximate reciprocal has relative error <= rcp_err. Cell i holds the rows
// whose computed q = x1·rcp(x2) is in [i/64, (i+1)/64); the true q is within 2·rcp_err of
// that, and the root grows with q: lo is the root for ε + δ at the cell's lowest q, hi the
// root for ε − δ at its highest. Stored: −2·lo·(1 − 4·rcp_err) and −hi·(1 + 4·rcp_err)
// rounded outwards (the kernel divides them by −x1 with the same reciprocal).
void build_predictor(std::size_t L, float eps, double rcp_err, kisa::GatePredictor& P) {
  const double e = static_cast<double>(eps), d = kisa::kGatePredSlack;
  const double n = kisa::kGatePredCells, m = 2.0 * rcp_err + 0x1p-20;
  const double shrink = 1.0 - 4.0 * rcp_err - 0x1p-20, grow = 1.0 + 4.0 * rcp_err + 0x1p-20;
  P.ties_over = e + d < std::log(2.0);
  double lo_prev = 0.0, hi_prev = 0.0;
  for (int i = 0; i < kisa::kGatePredCells; ++i) {
    const double q_lo = L == 2 ? 0.0 : std::max(0.0, i / n - m);
    const double q_hi = L == 2 ? 0.0 : std::min(1.0, (i + 1) / n + m);
    const double lo = entropy_root(q_lo, e + d, lo_prev, false);
    const double hi = entropy_root(q_hi, e - d, hi_prev, true);
    const double lo2 = 2.0 * lo * shrink, hi2 = hi * grow;
    float fl = static_cast<float>(lo2);
    if (static_cast<double>(fl) > lo2) fl = std::nextafter(fl, 0.0f);
    float fh = static_cast<float>(hi2);
    if (static_cast<double>(fh) < hi2) fh = std::nextafter(fh, HUGE_VALF);
    P.nlo[i] = -fl;  // -0.0f for a zero bound: x·(negative) stays +0
    P.nhi[i] = -fh;
    lo_prev = lo;
    hi_prev = std::isfinite(hi) ? hi : 0.0;
  }
}

// The predictor for this call: built once per (L, ε) per thread (about 20 µs) and reused.
const kisa::GatePredictor* predictor(std::size_t L, float eps) {
  struct Cache {
    bool valid = false;
    std::size_t L = 0;
    float eps = 0.0f;
    kisa::GatePredictor P;
  };
  static thread_local Cache c;
  if (!c.valid || c.L != L || std::memcmp(&c.eps, &eps, sizeof eps) != 0) {
    build_predictor(L, eps, kisa::table().rcp_error, c.P);
    c.valid = true;
    c.L = L;
    c.eps = eps;
  }
  return &c.P;
}
}  // namespace

void check_gate_beta(double v, bool per_row, std::size_t row, bool has_max_entropy) {
  LAMINA_CHECK(std::isfinite(v) && std::fabs(v) <= FLT_MAX, "beta",
               per_row ? detail::concat("[", row, "]") : std::string(), " = ", v,
               " is not a finite float32 value");
  LAMINA_CHECK(!has_max_entropy || v > 0.0, "beta",
               per_row ? detail::concat("[", row, "]") : std::string(), " = ", v,
               " must be > 0 when max_entropy is given (doubling beta sharpens the gate only "
               "for beta > 0)");
}

void check_gate_entropy(double max_entropy, int max_doublings) {
  LAMINA_CHECK(std::isfinite(max_entropy) && max_entropy >= 0.0,
               "max_entropy (epsilon) must be finite and >= 0, got ", max_entropy);
  LAMINA_CHECK(max_doublings >= 0 && max_doublings <= 1024,
               "max_doublings must be in [0, 1024], got ", max_doublings);
}

void softmax_gate(const float* relevance, std::size_t b, std::size_t L, const RowParam& beta,
                  bool has_max_entropy, double max_entropy, int max_doublings, float* gamma,
                  double* beta_used, int threads, int predict) {
  LAMINA_CHECK(L >= 1, "relevance must have at least one column (one per memory layer), got 0");
  const std::size_t nb = beta.per_row() ? b : 1;
  for (std::size_t i = 0; i < nb; ++i)
    check_gate_beta(beta[i], beta.per_row(), i, has_max_entropy);
  if (has_max_entropy) check_gate_entropy(max_entropy, max_doublings);
  if (b == 0) return;

  const bool doubling = has_max_entropy && max_doublings > 0;
  // Rows of 2 or 3 layers start their doublings where the predictor's proof ends (same
  // results, about one softmax per row instead of one per round; see kisa::GatePredictor).
  const bool use_pred = doubling && (L == 2 || L == 3) &&
                        (predict > 0 || (predict < 0 && b >= kPredictMinRows));
  const std::size_t T = doubling ? kisa::kGateTile : kPlainTile;
  // (the predictor's list of rows to settle is processed per task: 16 tiles fill its vectors)
  const std::size_t kTilesPerTask = use_pred ? 16 : kRowsPerTask / T;
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
  if (use_pred) job.pred = predictor(L, job.eps);
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
  // (the doubling rounds' lists for tiles of min(T, b) rows; with the predictor, its list)
  const std::size_t lv_floats =
      doubling && L <= 4 ? std::max(kisa::gate_levels_floats(L, std::min(T, b)),
                                    use_pred ? kisa::gate_list_floats() : std::size_t(0))
                         : 0;
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
    if (use_pred) K.gate_flush(job, B);  // the rows the tiles left to settle
    if (stream) kisa::stream_fence();
  });

  if (const std::size_t i = first_bad.load(); i < b)
    throw ValueError(detail::concat("relevance[", i,
                                    "] contains NaN or Inf; pass finite relevances "
                                    "(check numpy.isfinite)"));
}

}  // namespace lamina
