// KV eviction: radix top-k, per-row selection, cross-head counts (see lamina/kv.hpp).
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/kv.hpp"
#include "lamina/parallel.hpp"

namespace lamina::kv {

namespace {

constexpr std::size_t kSmall = 64;          // finish a radix select by sorting below this
constexpr std::size_t kMinPerThread = 1 << 15;  // elements worth a thread

// Keys of a float row; the level-0 (top 11 bits) histogram is built in the same pass.
void build_keys(const float* s, std::size_t n, uint32_t* keys, uint32_t* hist0) {
  std::fill(hist0, hist0 + 2048, 0u);
  for (std::size_t j = 0; j < n; ++j) {
    const uint32_t key = order_key(s[j]);
    keys[j] = key;
    ++hist0[key >> 21];
  }
}

Cut finish_small(const uint32_t* cand, std::size_t m, std::size_t need, std::size_t greater) {
  uint32_t tmp[kSmall];
  std::copy(cand, cand + m, tmp);
  std::sort(tmp, tmp + m, std::greater<uint32_t>());
  Cut c;
  c.key = tmp[need - 1];
  std::size_t gt = 0;
  while (tmp[gt] > c.key) ++gt;
  c.greater = greater + gt;
  c.take_equal = need - gt;
  return c;
}

// Radix select with an optional precomputed level-0 histogram.
Cut kth_largest_impl(const uint32_t* keys, std::size_t n, std::size_t k, const uint32_t* hist0,
                     std::vector<uint32_t>& scratch) {
  LAMINA_ASSERT(k >= 1 && k <= n);
  static constexpr int kBits[3] = {11, 11, 10};
  static constexpr int kShift[3] = {21, 10, 0};
  uint32_t hist[2048];
  const uint32_t* cand = keys;
  std::size_t m = n, need = k, greater = 0;
  uint32_t prefix = 0;
  for (int level = 0; level < 3; ++level) {
    if (m <= kSmall) return finish_small(cand, m, need, greater);
    const uint32_t nb = 1u << kBits[level], mask = nb - 1;
    const int shift = kShift[level];
    const uint32_t* h = hist;
    if (level == 0 && hist0 != nullptr) {
      h = hist0;
    } else {
      std::fill(hist, hist + nb, 0u);
      for (std::size_t i = 0; i < m; ++i) ++hist[(cand[i] >> shift) & mask];
    }
    uint32_t b = nb - 1;
    std::size_t above = 0;
    while (above + h[b] < need) {
      above += h[b];
      --b;
    }
    greater += above;
    need -= above;
    prefix |= b << shift;
    const std::size_t in_bucket = h[b];
    if (level == 2) break;  // every remaining candidate equals `prefix`
    if (scratch.size() < in_bucket) scratch.resize(in_bucket);
    uint32_t* dst = scratch.data();
    std::size_t w = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const uint32_t x = cand[i];
      if (((x >> shift) & mask) == b) dst[w++] = x;
    }
    LAMINA_ASSERT(w == in_bucket);
    cand = dst;
    m = in_bucket;
  }
  Cut c;
  c.key = prefix;
  c.greater = greater;
  c.take_equal = need;
  return c;
}

// Positions of the kept entries of one key row (ascending), per `c`; returns the count.
std::size_t emit_row(const uint32_t* keys, std::size_t n, const Cut& c, int64_t* out) {
  const uint32_t t = c.key;
  std::size_t eq = c.take_equal, w = 0;
  const std::size_t k = c.greater + c.take_equal;
  std::size_t j = 0;
  for (; j < n && w < k; ++j) {
    const uint32_t x = keys[j];
    if (x > t) {
      out[w++] = static_cast<int64_t>(j);
    } else if (x == t && eq > 0) {
      out[w++] = static_cast<int64_t>(j);
      --eq;
    }
  }
  return w;
}

struct Workspace {
  std::vector<uint32_t> keys, scratch;
  uint32_t hist0[2048];
};

}  // namespace

Cut kth_largest(const uint32_t* keys, std::size_t n, std::size_t k,
                std::vector<uint32_t>& scratch) {
  LAMINA_CHECK(k >= 1 && k <= n, "kth_largest: k must be in [1, n], got k=", k, ", n=", n);
  return kth_largest_impl(keys, n, k, nullptr, scratch);
}

void select_rows(const float* scores, std::size_t n_rows, std::size_t n, const int64_t* k,
                 std::size_t tail, const int64_t* offsets, int64_t* out, int threads) {
  bool need_scores = false;
  for (std::size_t r = 0; r < n_rows; ++r) {
    LAMINA_CHECK(k[r] >= 0 && static_cast<std::size_t>(k[r]) <= n, "select_rows: k[", r,
                 "] = ", k[r], " is outside [0, ", n, "]");
    LAMINA_CHECK(offsets[r + 1] - offsets[r] == k[r] + static_cast<int64_t>(tail),
                 "select_rows: offsets do not match k + tail at row ", r);
    if (k[r] > 0 && static_cast<std::size_t>(k[r]) < n) need_scores = true;
  }
  LAMINA_CHECK(!need_scores || scores != nullptr, "select_rows: scores are required");
  const int nt = threads_for(n_rows * (n + 1), kMinPerThread, threads);
  std::vector<Workspace> ws(nt > 0 ? nt : 1);
  parallel_for(n_rows, nt, [&](std::size_t r, int worker) {
    int64_t* o = out + offsets[r];
    const std::size_t kr = static_cast<std::size_t>(k[r]);
    std::size_t w = 0;
    if (kr == n) {
      for (std::size_t j = 0; j < n; ++j) o[j] = static_cast<int64_t>(j);
      w = n;
    } else if (kr > 0) {
      Workspace& W = ws[worker];
      if (W.keys.size() < n) W.keys.resize(n);
      build_keys(scores + r * n, n, W.keys.data(), W.hist0);
      const Cut c = kth_largest_impl(W.keys.data(), n, kr, W.hist0, W.scratch);
      w = emit_row(W.keys.data(), n, c, o);
      LAMINA_ASSERT(w == kr);
    }
    for (std::size_t t = 0; t < tail; ++t) o[w + t] = static_cast<int64_t>(n + t);
  });
}

void layer_head_counts(const float* scores, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, const int64_t* total, const int64_t* floor,
                       int64_t* counts, int threads) {
  const std::size_t N = kv_heads * n;
  for (std::size_t l = 0; l < layers; ++l) {
    const int64_t f = floor ? floor[l] : 0;
    LAMINA_CHECK(f >= 0 && static_cast<std::size_t>(f) <= n, "layer_head_counts: floor[", l,
                 "] = ", f, " is outside [0, ", n, "]");
    LAMINA_CHECK(total[l] >= f * static_cast<int64_t>(kv_heads) &&
                     static_cast<std::size_t>(total[l]) <= N,
                 "layer_head_counts: total[", l, "] = ", total[l], " is outside [",
                 f * static_cast<int64_t>(kv_heads), ", ", N, "]");
  }
  const int nt = threads_for(layers * (N + 1), kMinPerThread, threads);
  std::vector<Workspace> ws(nt > 0 ? nt : 1);
  parallel_for(layers, nt, [&](std::size_t l, int worker) {
    int64_t* cnt = counts + l * kv_heads;
    const std::size_t tot = static_cast<std::size_t>(total[l]);
    if (tot == 0 || tot == N) {
      for (std::size_t g = 0; g < kv_heads; ++g) cnt[g] = tot == 0 ? 0 : static_cast<int64_t>(n);
      return;
    }
    Workspace& W = ws[worker];
    if (W.keys.size() < N) W.keys.resize(N);
    uint32_t* keys = W.keys.data();
    const float* s = scores + l * N;
    const std::size_t f = floor ? static_cast<std::size_t>(floor[l]) : 0;
    for (std::size_t g = 0; g < kv_heads; ++g) {
      uint32_t* row = keys + g * n;
      build_keys(s + g * n, n, row, W.hist0);
      if (f == 0) continue;
      if (f >= n) {
        std::fill(row, row + n, std::numeric_limits<uint32_t>::max());
        continue;
      }
      // Pin the row's top f (ties: smaller position) above every unpinned entry.
      const Cut c = kth_largest_impl(row, n, f, W.hist0, W.scratch);
      std::size_t eq = c.take_equal;
      for (std::size_t j = 0; j < n; ++j) {
        const uint32_t x = row[j];
        if (x > c.key) {
          row[j] = std::numeric_limits<uint32_t>::max();
        } else if (x == c.key && eq > 0) {
          row[j] = std::numeric_limits<uint32_t>::max();
          --eq;
        }
      }
    }
    const Cut c = kth_largest_impl(keys, N, tot, nullptr, W.scratch);
    std::size_t eq = c.take_equal;
    for (std::size_t g = 0; g < kv_heads; ++g) {
      const uint32_t* row = keys + g * n;
      std::size_t gt = 0, same = 0;
      for (std::size_t j = 0; j < n; ++j) {
        gt += row[j] > c.key;
        same += row[j] == c.key;
      }
      const std::size_t take = std::min(same, eq);
      eq -= take;
      cnt[g] = static_cast<int64_t>(gt + take);
    }
  });
}

}  // namespace lamina::kv
