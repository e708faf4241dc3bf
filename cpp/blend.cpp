#include "lamina/blend.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/kernel_isa.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

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

// Shared driver: validates, splits the updated rows into blocks and runs the ISA's row loop.
void run_rows(const kisa::BlendJob& job, std::size_t n, std::size_t m, int threads) {
  if (job.index == nullptr)
    LAMINA_CHECK(m == n, "targets must have one row per row of rows when no index is given: "
                         "got ", m, " target rows for ", n, " rows");
  else
    check_index(job.index, m, n);
  check_buffers(job.rows, n, job.d, job.targets, m, job.drift);
  if (m == 0) return;

  const std::size_t d1 = std::max<std::size_t>(job.d, 1);
  const std::size_t rows_per_task = std::max<std::size_t>(1, (std::size_t(1) << 16) / d1);
  const std::size_t n_tasks = (m + rows_per_task - 1) / rows_per_task;
  const int nt = threads_for(m * d1, std::size_t(1) << 18, threads);
  const kisa::Table& K = kisa::table();
  std::vector<float> backup(static_cast<std::size_t>(nt) * job.d);
  std::atomic<std::size_t> first_bad{m};
  std::atomic<std::size_t> n_bad{0};
  parallel_for(n_tasks, nt, [&](std::size_t task, int worker) {
    const std::size_t lo = task * rows_per_task, hi = std::min(m, lo + rows_per_task);
    float* scratch = backup.data() + static_cast<std::size_t>(worker) * job.d;
    const kisa::BadRows bad = K.blend_rows(job, lo, hi, scratch);
    if (bad.count) {
      n_bad.fetch_add(bad.count);
      std::size_t cur = first_bad.load();
      while (bad.first < cur && !first_bad.compare_exchange_weak(cur, bad.first)) {
      }
    }
  });

  if (const std::size_t nb = n_bad.load()) {
    const std::size_t k = first_bad.load();
    const std::size_t r = job.index ? static_cast<std::size_t>(job.index[k]) : k;
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

// The job of an update of rows [n, d] from targets at `index` with `param` (α or λ), the drift
// written to `drift`; the caller sets the update's kind (renormalize, damped).
kisa::BlendJob blend_job(float* rows, std::size_t d, const float* targets, const int64_t* index,
                         const RowParam& param, float* drift) {
  kisa::BlendJob job;
  job.rows = rows;
  job.d = d;
  job.targets = targets;
  job.index = index;
  job.param = param;
  job.drift = drift;
  return job;
}

}  // namespace

void ema_blend(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
               const int64_t* index, const RowParam& alpha, bool renormalize, float* drift,
               int threads) {
  check_param(alpha, m, "alpha", 0.0, 1.0, "a finite value in [0, 1]");
  kisa::BlendJob job = blend_job(rows, d, targets, index, alpha, drift);
  job.renormalize = renormalize;
  run_rows(job, n, m, threads);
}

void damped_update(float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const int64_t* index, const RowParam& lam, float* drift,
                   int threads) {
  check_param(lam, m, "lam", 0.0, HUGE_VAL, "a finite value >= 0");
  kisa::BlendJob job = blend_job(rows, d, targets, index, lam, drift);
  job.damped = true;
  run_rows(job, n, m, threads);
}

}  // namespace lamina
