#include "lamina/blend.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

struct EmaStep {
  float alpha, one_minus_alpha;
  float operator()(float x, float t) const {
    return kmath::ema_step(x, t, alpha, one_minus_alpha);
  }
};

struct DampedStep {
  float w_prev, w_target;
  float operator()(float x, float t) const { return kmath::damped_step(x, t, w_prev, w_target); }
};

// 8 independent partial sums: GCC vectorises the inner k-loops (SLP) without -ffast-math,
// and the summation order is fixed, so the result does not depend on the ISA or threads.
constexpr int kLanes = 8;

// First look at one row (it stays in L1 for the second loop): all of x and t finite? and,
// for renormalisation, the squared norm of the blended row.
template <bool kRenorm, class Step>
inline bool scan_row(const float* __restrict x, const float* __restrict t, std::size_t d,
                     const Step& step, float* norm2) {
  float chk[kLanes] = {};
  float nrm[kLanes] = {};
  std::size_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float a = x[j + k], b = t[j + k];
      chk[k] += (a - a) + (b - b);  // 0 for finite values, NaN otherwise
      if constexpr (kRenorm) {
        const float v = step(a, b);
        nrm[k] += v * v;
      }
    }
  }
  for (int k = 0; j < d; ++j, ++k) {
    const float a = x[j], b = t[j];
    chk[k] += (a - a) + (b - b);
    if constexpr (kRenorm) {
      const float v = step(a, b);
      nrm[k] += v * v;
    }
  }
  float c = 0.0f, s = 0.0f;
  for (int k = 0; k < kLanes; ++k) {
    c += chk[k];
    s += nrm[k];
  }
  *norm2 = s;
  return c == 0.0f;
}

// Rewrite one row; returns ‖Δ‖².
template <bool kRenorm, class Step>
inline float write_row(float* __restrict x, const float* __restrict t, std::size_t d,
                       const Step& step, float scale) {
  float acc[kLanes] = {};
  std::size_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float a = x[j + k];
      float v = step(a, t[j + k]);
      if constexpr (kRenorm) v *= scale;
      acc[k] += kmath::sq_delta(v, a);
      x[j + k] = v;
    }
  }
  for (int k = 0; j < d; ++j, ++k) {
    const float a = x[j];
    float v = step(a, t[j]);
    if constexpr (kRenorm) v *= scale;
    acc[k] += kmath::sq_delta(v, a);
    x[j] = v;
  }
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

bool overlaps(const void* a, std::size_t abytes, const void* b, std::size_t bbytes) {
  if (abytes == 0 || bbytes == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

void check_buffers(const float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const float* drift) {
  const std::size_t rb = n * d * sizeof(float), tb = m * d * sizeof(float),
                    db = m * sizeof(float);
  LAMINA_CHECK(!overlaps(rows, rb, targets, tb),
               "targets shares memory with rows; pass a copy (targets.copy())");
  LAMINA_CHECK(!overlaps(rows, rb, drift, db), "out (drift) shares memory with rows");
  LAMINA_CHECK(!overlaps(targets, tb, drift, db), "out (drift) shares memory with targets");
}

// Range and uniqueness of the update index (before anything is written).
void check_index(const int64_t* index, std::size_t m, std::size_t n) {
  for (std::size_t k = 0; k < m; ++k)
    LAMINA_CHECK_INDEX(index[k] >= 0 && static_cast<uint64_t>(index[k]) < n, "index[", k,
                       "] = ", index[k], " is out of range for ", n,
                       " rows (valid: 0 <= index < n; negative indices are not accepted)");
  if (m < 2) return;
  if (m < n / 64) {  // sparse update: sort a copy
    std::vector<int64_t> s(index, index + m);
    std::sort(s.begin(), s.end());
    const auto it = std::adjacent_find(s.begin(), s.end());
    LAMINA_CHECK(it == s.end(), "index contains row ", *it,
                 " more than once; each row may be updated at most once per call "
                 "(combine the targets first, e.g. average them)");
  } else {  // dense update: bitmap over the rows
    std::vector<uint64_t> seen((n + 63) / 64, 0);
    for (std::size_t k = 0; k < m; ++k) {
      const uint64_t r = static_cast<uint64_t>(index[k]);
      const uint64_t bit = 1ull << (r & 63);
      LAMINA_CHECK(!(seen[r >> 6] & bit), "index contains row ", r,
                   " more than once; each row may be updated at most once per call "
                   "(combine the targets first, e.g. average them)");
      seen[r >> 6] |= bit;
    }
  }
}

// Shared driver: validates, splits rows into blocks and runs the two-loop row update.
template <bool kRenorm, class MakeStep>
void run_rows(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
              const int64_t* index, const MakeStep& make_step, float* drift, int threads) {
  if (index == nullptr)
    LAMINA_CHECK(m == n, "targets must have one row per row of rows when no index is given: "
                         "got ", m, " target rows for ", n, " rows");
  else
    check_index(index, m, n);
  check_buffers(rows, n, d, targets, m, drift);
  if (m == 0) return;

  const std::size_t rows_per_task = std::max<std::size_t>(1, (1u << 16) / std::max<std::size_t>(d, 1));
  const std::size_t n_tasks = (m + rows_per_task - 1) / rows_per_task;
  const int nt = threads_for(m * std::max<std::size_t>(d, 1), std::size_t(1) << 18, threads);
  std::atomic<std::size_t> first_bad{m};
  std::atomic<std::size_t> n_bad{0};

  parallel_for(n_tasks, nt, [&](std::size_t task, int) {
    const std::size_t lo = task * rows_per_task, hi = std::min(m, lo + rows_per_task);
    std::size_t bad_here = 0, first_here = m;
    for (std::size_t k = lo; k < hi; ++k) {
      float* x = rows + (index ? static_cast<std::size_t>(index[k]) : k) * d;
      const float* t = targets + k * d;
      const auto step = make_step(k);
      float norm2 = 0.0f;
      if (!scan_row<kRenorm>(x, t, d, step, &norm2)) {
        drift[k] = std::numeric_limits<float>::quiet_NaN();
        if (bad_here++ == 0) first_here = k;
        continue;
      }
      float scale = 1.0f;
      if constexpr (kRenorm) scale = norm2 > 0.0f ? 1.0f / std::sqrt(norm2) : 1.0f;
      drift[k] = write_row<kRenorm>(x, t, d, step, scale);
    }
    if (bad_here) {
      n_bad.fetch_add(bad_here);
      std::size_t cur = first_bad.load();
      while (first_here < cur && !first_bad.compare_exchange_weak(cur, first_here)) {
      }
    }
  });

  if (const std::size_t nb = n_bad.load()) {
    const std::size_t k = first_bad.load();
    const std::size_t r = index ? static_cast<std::size_t>(index[k]) : k;
    throw ValueError(detail::concat(
        nb, " updated row(s) contain NaN or Inf (first: rows[", r, "] with targets[", k,
        "]); those rows were left unchanged, all other rows were updated. Pass finite values "
        "(check numpy.isfinite)"));
  }
}

void check_param(const RowParam& p, std::size_t m, const char* name, double lo, double hi,
                 const char* range) {
  const std::size_t count = p.per_row() ? m : 1;
  for (std::size_t k = 0; k < count; ++k) {
    const double v = p[k];
    LAMINA_CHECK(std::isfinite(v) && v >= lo && v <= hi, name,
                 p.per_row() ? detail::concat("[", k, "]") : std::string(), " = ", v,
                 " is out of range; expected ", range);
  }
}

}  // namespace

void ema_blend(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
               const int64_t* index, const RowParam& alpha, bool renormalize, float* drift,
               int threads) {
  check_param(alpha, m, "alpha", 0.0, 1.0, "a finite value in [0, 1]");
  auto make = [&alpha](std::size_t k) {
    const double a = alpha[k];
    return EmaStep{static_cast<float>(a), static_cast<float>(1.0 - a)};
  };
  if (renormalize)
    run_rows<true>(rows, n, d, targets, m, index, make, drift, threads);
  else
    run_rows<false>(rows, n, d, targets, m, index, make, drift, threads);
}

void damped_update(float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const int64_t* index, const RowParam& lam, float* drift,
                   int threads) {
  check_param(lam, m, "lam", 0.0, HUGE_VAL, "a finite value >= 0");
  auto make = [&lam](std::size_t k) {
    DampedStep s{};
    kmath::damped_weights(lam[k], &s.w_prev, &s.w_target);
    return s;
  };
  run_rows<false>(rows, n, d, targets, m, index, make, drift, threads);
}

}  // namespace lamina
