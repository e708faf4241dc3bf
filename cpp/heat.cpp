#include "lamina/heat.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "lamina/common.hpp"
#include "lamina/groupby.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

constexpr std::size_t kBlock = 1 << 15;  // elements per parallel task

// Fused heat over [lo, hi). Returns nonzero when a recency argument (last_access − now)/μ or a
// heat value is not finite: NaN/Inf in any input shows up in one of the two (the caller then
// pinpoints it). Both checks are float32 OR-reductions, so the loop vectorises.
template <class V, class L>
unsigned heat_block(const V* __restrict visits, const L* __restrict ilen,
                    const double* __restrict last, std::size_t lo, std::size_t hi, double now,
                    float a, float b, float c, double inv_mu, float* __restrict out) {
  unsigned bad = 0;
  for (std::size_t i = lo; i < hi; ++i) {
    const float x = kmath::heat_recency_arg(now, last[i], inv_mu);
    const float h = kmath::heat_value(kmath::count_to_float(visits[i]),
                                      kmath::count_to_float(ilen[i]), kmath::fast_expf(x), a, b,
                                      c);
    bad |= static_cast<unsigned>(!kmath::is_finite(x)) |
           static_cast<unsigned>(!kmath::is_finite(h));
    out[i] = h;
  }
  return bad;
}

template <class V, class L>
void heat_typed(const V* visits, const L* ilen, const double* last, std::size_t n, double now,
                float a, float b, float c, double inv_mu, float* out, int threads) {
  const std::size_t n_tasks = (n + kBlock - 1) / kBlock;
  const int nt = threads_for(n, std::size_t(1) << 17, threads);
  std::atomic<unsigned> bad{0};
  parallel_for(n_tasks, nt, [&](std::size_t task, int) {
    const std::size_t lo = task * kBlock, hi = std::min(n, lo + kBlock);
    if (const unsigned f = heat_block(visits, ilen, last, lo, hi, now, a, b, c, inv_mu, out))
      bad.fetch_or(f);
  });
  if (!bad.load()) return;
  // Error path only: find the first offending row and say which input is at fault. (A flag
  // raised only because (last − now)/μ overflowed float32 with finite inputs is not an
  // error: the recency is then 0 or the heat is non-finite, which is reported below.)
  for (std::size_t i = 0; i < n; ++i) {
    LAMINA_CHECK(std::isfinite(last[i]), "last_access[", i, "] = ", last[i],
                 " is not finite; pass finite event times in seconds");
    if constexpr (std::is_floating_point_v<V>)
      LAMINA_CHECK(std::isfinite(visits[i]), "visits[", i, "] = ", visits[i], " is not finite");
    if constexpr (std::is_floating_point_v<L>)
      LAMINA_CHECK(std::isfinite(ilen[i]), "interaction_len[", i, "] = ", ilen[i],
                   " is not finite");
    LAMINA_CHECK(std::isfinite(out[i]), "heat[", i,
                 "] overflows float32 (visits=", visits[i], ", interaction_len=", ilen[i],
                 ", now - last_access=", now - last[i],
                 " s); check the weights and that times are in seconds");
  }
}

template <class V>
void heat_dispatch_len(const V* visits, NumColumn ilen, const double* last, std::size_t n,
                       double now, float a, float b, float c, double inv_mu, float* out,
                       int threads) {
  switch (ilen.kind) {
    case NumColumn::Kind::F32:
      return heat_typed(visits, static_cast<const float*>(ilen.data), last, n, now, a, b, c,
                        inv_mu, out, threads);
    case NumColumn::Kind::I32:
      return heat_typed(visits, static_cast<const int32_t*>(ilen.data), last, n, now, a, b, c,
                        inv_mu, out, threads);
    case NumColumn::Kind::I64:
      return heat_typed(visits, static_cast<const int64_t*>(ilen.data), last, n, now, a, b, c,
                        inv_mu, out, threads);
  }
  LAMINA_ASSERT(false);
}

}  // namespace

void heat_scores(NumColumn visits, NumColumn interaction_len, const double* last_access,
                 std::size_t n, double now, double a, double b, double c, double mu,
                 float* heat, int threads) {
  LAMINA_CHECK(std::isfinite(now), "now must be finite (seconds), got ", now);
  LAMINA_CHECK(std::isfinite(a) && std::isfinite(b) && std::isfinite(c),
               "the heat weights a, b, c must be finite, got ", a, ", ", b, ", ", c);
  LAMINA_CHECK(std::isfinite(mu) && mu > 0.0, "mu (the recency time scale, seconds) must be "
               "finite and > 0, got ", mu);
  if (n == 0) return;
  const float fa = static_cast<float>(a), fb = static_cast<float>(b), fc = static_cast<float>(c);
  const double inv_mu = 1.0 / mu;
  switch (visits.kind) {
    case NumColumn::Kind::F32:
      return heat_dispatch_len(static_cast<const float*>(visits.data), interaction_len,
                               last_access, n, now, fa, fb, fc, inv_mu, heat, threads);
    case NumColumn::Kind::I32:
      return heat_dispatch_len(static_cast<const int32_t*>(visits.data), interaction_len,
                               last_access, n, now, fa, fb, fc, inv_mu, heat, threads);
    case NumColumn::Kind::I64:
      return heat_dispatch_len(static_cast<const int64_t*>(visits.data), interaction_len,
                               last_access, n, now, fa, fb, fc, inv_mu, heat, threads);
  }
  LAMINA_ASSERT(false);
}

std::vector<int64_t> select_hot(const float* heat, std::size_t n, double threshold,
                                const uint64_t* namespaces, int threads) {
  LAMINA_CHECK(!std::isnan(threshold), "threshold must not be NaN");
  // For float32 h and real T: h > T  <=>  h > F with F = T rounded down to a float32, so the
  // loops compare in float32 (and vectorise) while honouring a float64 threshold exactly.
  float thr = static_cast<float>(threshold);
  if (static_cast<double>(thr) > threshold) thr = std::nextafter(thr, -HUGE_VALF);
  const std::size_t n_tasks = (n + kBlock - 1) / kBlock;
  const int nt = threads_for(n, std::size_t(1) << 18, threads);
  std::vector<std::size_t> counts(n_tasks + 1, 0);
  std::atomic<std::size_t> first_bad{n};
  parallel_for(n_tasks, nt, [&](std::size_t task, int) {
    const std::size_t lo = task * kBlock, hi = std::min(n, lo + kBlock);
    unsigned cnt = 0, bad = 0;  // kBlock < 2^32
    for (std::size_t i = lo; i < hi; ++i) {
      const float h = heat[i];
      cnt += static_cast<unsigned>(h > thr);
      bad |= static_cast<unsigned>(!kmath::is_finite(h));
    }
    counts[task + 1] = cnt;
    if (bad) {
      std::size_t i = lo;
      while (kmath::is_finite(heat[i])) ++i;
      std::size_t cur = first_bad.load();
      while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
      }
    }
  });
  if (const std::size_t i = first_bad.load(); i < n)
    throw ValueError(detail::concat("heat[", i, "] = ", heat[i],
                                    " is not finite; heat scores must be finite"));
  for (std::size_t t = 0; t < n_tasks; ++t) counts[t + 1] += counts[t];
  std::vector<int64_t> out(counts[n_tasks]);
  parallel_for(n_tasks, nt, [&](std::size_t task, int) {
    const std::size_t lo = task * kBlock, hi = std::min(n, lo + kBlock);
    int64_t* o = out.data() + counts[task];
    std::size_t k = 0;
    for (std::size_t i = lo; i < hi; ++i)
      if (heat[i] > thr) o[k++] = static_cast<int64_t>(i);
  });
  if (namespaces == nullptr || out.empty()) return out;
  NamespaceGroups g = group_by_namespace(namespaces, n, nullptr, out.data(), out.size());
  return std::move(g.rows);
}

}  // namespace lamina
