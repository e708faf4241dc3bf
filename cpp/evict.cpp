#include "lamina/evict.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "lamina/common.hpp"
#include "lamina/groupby.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

constexpr std::size_t kBlock = 1 << 16;

struct Entry {
  float s;
  int64_t i;
};

// First row (in index order) that is live and has a non-finite score, or n.
std::size_t first_bad_score(const float* scores, const uint8_t* live, std::size_t n,
                            int threads) {
  const std::size_t n_tasks = (n + kBlock - 1) / kBlock;
  std::atomic<std::size_t> first{n};
  parallel_for(n_tasks, threads_for(n, std::size_t(1) << 18, threads),
               [&](std::size_t task, int) {
                 const std::size_t lo = task * kBlock, hi = std::min(n, lo + kBlock);
                 unsigned bad = 0;
                 if (live) {
                   for (std::size_t i = lo; i < hi; ++i)
                     bad |= static_cast<unsigned>(!kmath::is_finite(scores[i])) &
                            static_cast<unsigned>(live[i] != 0);
                 } else {
                   for (std::size_t i = lo; i < hi; ++i)
                     bad |= static_cast<unsigned>(!kmath::is_finite(scores[i]));
                 }
                 if (!bad) return;
                 std::size_t i = lo;
                 while (kmath::is_finite(scores[i]) || (live && !live[i])) ++i;
                 std::size_t cur = first.load();
                 while (i < cur && !first.compare_exchange_weak(cur, i)) {
                 }
               });
  return first.load();
}

}  // namespace

std::vector<int64_t> evict_to_capacity(const float* scores, const uint64_t* namespaces,
                                       std::size_t n, const uint8_t* live,
                                       int64_t default_capacity, const uint64_t* cap_keys,
                                       const int64_t* cap_values, std::size_t n_caps,
                                       int threads) {
  LAMINA_CHECK(default_capacity >= -1,
               "capacity must be >= 0 (or -1 for unbounded), got ", default_capacity);
  for (std::size_t k = 0; k < n_caps; ++k)
    LAMINA_CHECK(cap_values[k] >= 0, "capacity for namespace ", cap_keys[k], " must be >= 0, got ",
                 cap_values[k]);
  if (n_caps > 1) {
    std::vector<uint64_t> sorted(cap_keys, cap_keys + n_caps);
    std::sort(sorted.begin(), sorted.end());
    const auto it = std::adjacent_find(sorted.begin(), sorted.end());
    LAMINA_CHECK(it == sorted.end(), "capacity mapping lists namespace ", *it, " twice");
  }
  if (const std::size_t i = first_bad_score(scores, live, n, threads); i < n)
    throw ValueError(detail::concat("scores[", i, "] = ", scores[i],
                                    " is not finite; eviction scores must be finite"));
  if (n == 0 || (default_capacity < 0 && n_caps == 0)) return {};

  const NamespaceGroups groups = group_by_namespace(namespaces, n, live, nullptr, 0);
  const std::size_t G = groups.keys.size();
  std::vector<int64_t> cap(G, default_capacity);
  for (std::size_t k = 0; k < n_caps; ++k) {
    const auto it = std::lower_bound(groups.keys.begin(), groups.keys.end(), cap_keys[k]);
    if (it != groups.keys.end() && *it == cap_keys[k]) cap[it - groups.keys.begin()] = cap_values[k];
  }
  std::vector<uint32_t> over;
  std::size_t total = 0;
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t c = groups.size(g);
    if (cap[g] >= 0 && c > static_cast<std::size_t>(cap[g])) {
      over.push_back(static_cast<uint32_t>(g));
      total += c - static_cast<std::size_t>(cap[g]);
    }
  }
  if (over.empty()) return {};

  // Mark the evicted rows, one over-full namespace per task (groups own disjoint rows, so
  // the byte flags are written without races).
  std::vector<uint8_t> evict(n, 0);
  const int nt = threads_for(n, std::size_t(1) << 16, threads);
  std::vector<std::vector<Entry>> bufs(static_cast<std::size_t>(std::max(nt, 1)));
  parallel_for(over.size(), nt, [&](std::size_t task, int worker) {
    const std::size_t g = over[task];
    const int64_t* rows = groups.rows.data() + groups.offsets[g];
    const std::size_t c = groups.size(g), k = c - static_cast<std::size_t>(cap[g]);
    if (k == c) {
      for (std::size_t j = 0; j < c; ++j) evict[rows[j]] = 1;
      return;
    }
    std::vector<Entry>& buf = bufs[worker];
    buf.resize(c);
    for (std::size_t j = 0; j < c; ++j) buf[j] = {scores[rows[j]], rows[j]};
    std::nth_element(buf.begin(), buf.begin() + k, buf.end(), [](const Entry& a, const Entry& b) {
      return kmath::evict_before(a.s, a.i, b.s, b.i);
    });
    for (std::size_t j = 0; j < k; ++j) evict[buf[j].i] = 1;
  });

  std::vector<int64_t> out(total);
  std::size_t w = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (evict[i]) out[w++] = static_cast<int64_t>(i);
  LAMINA_ASSERT(w == total);
  return out;
}

}  // namespace lamina
