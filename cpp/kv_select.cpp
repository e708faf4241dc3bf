// KV eviction: exact top-k thresholds, per-row selection, cross-head counts (lamina/kv.hpp).
//
// The k-th largest value of a row is found exactly in one streaming pass in the common case:
// a strided sample of 1024 values brackets it between two sample order statistics (with a
// 4-sigma margin), one SIMD pass counts the values above the bracket and packs the few inside
// it, and nth_element on those finds the exact value. If the bracket misses (rare) or the row
// is short, nth_element on a copy of the row decides. The kept positions are then written by
// a second SIMD pass. Both passes are the RowKernels of kv_internal.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kv_internal.hpp"
#include "lamina/common.hpp"
#include "lamina/kv.hpp"
#include "lamina/parallel.hpp"

namespace lamina::kv {

namespace {

using detail::kSlack;
using detail::RowKernels;

constexpr std::size_t kExactBelow = 2048;      // rows this short: nth_element on a copy
constexpr std::size_t kSample = 1024;
constexpr std::size_t kMinPerThread = 1 << 15;  // elements worth a thread
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Workspace {
  std::vector<float> buf;     // band candidates / exact copy
  std::vector<float> layer;   // pinned copy of one layer (Ada-KV floor)
  std::vector<int64_t> pos;   // staging for kept positions (needs kSlack past the end)
  float* floats(std::size_t n) {
    if (buf.size() < n + kSlack) buf.resize(n + kSlack);
    return buf.data();
  }
  int64_t* positions(std::size_t n) {
    if (pos.size() < n + kSlack) pos.resize(n + kSlack);
    return pos.data();
  }
};

Cut exact_cut(const float* x, std::size_t n, std::size_t k, Workspace& W, const RowKernels& K) {
  float* b = W.floats(n);
  std::copy(x, x + n, b);
  std::nth_element(b, b + (k - 1), b + n, std::greater<float>());
  Cut c;
  c.value = b[k - 1];
  std::size_t gt, eq;
  K.count(x, n, c.value, &gt, &eq);
  c.greater = gt;
  c.take_equal = k - gt;
  return c;
}

Cut find_cut(const float* x, std::size_t n, std::size_t k, Workspace& W, const RowKernels& K) {
  LAMINA_ASSERT(k >= 1 && k <= n);
  if (n <= kExactBelow) return exact_cut(x, n, k, W, K);
  float sample[kSample];
  for (std::size_t i = 0; i < kSample; ++i) sample[i] = x[(i * n) / kSample];
  const double q = static_cast<double>(k) * kSample / static_cast<double>(n);
  const double d = 4.0 * std::sqrt(q * (1.0 - q / kSample)) + 4.0;
  const long r_hi = static_cast<long>(std::floor(q - d));
  const long r_lo = static_cast<long>(std::ceil(q + d));
  float lo = -kInf, hi = kInf;
  std::size_t lo_end = kSample;
  if (r_lo < static_cast<long>(kSample)) {
    std::nth_element(sample, sample + r_lo, sample + kSample, std::greater<float>());
    lo = sample[r_lo];
    lo_end = static_cast<std::size_t>(r_lo);
  }
  if (r_hi >= 0) {
    std::nth_element(sample, sample + r_hi, sample + lo_end, std::greater<float>());
    hi = sample[r_hi];
  }
  float* b = W.floats(n);
  std::size_t above;
  const std::size_t m = K.band(x, n, lo, hi, b, &above);
  if (above < k && k <= above + m) {
    const std::size_t need = k - above;
    std::nth_element(b, b + (need - 1), b + m, std::greater<float>());
    Cut c;
    c.value = b[need - 1];
    std::size_t g = 0;
    for (std::size_t i = 0; i + 1 < need; ++i) g += b[i] > c.value;
    c.greater = above + g;
    c.take_equal = k - c.greater;
    return c;
  }
  return exact_cut(x, n, k, W, K);
}

// Kept positions (ascending) of a row for cut `c`, written to `out` (k + kSlack slots).
std::size_t emit(const float* x, std::size_t n, const Cut& c, int64_t* out, const RowKernels& K) {
  if (c.take_equal == 0) return K.positions(x, n, c.value, false, 0, out);
  const std::size_t p = K.nth_equal(x, n, c.value, c.take_equal);
  LAMINA_ASSERT(p < n);
  std::size_t w = K.positions(x, p + 1, c.value, true, 0, out);
  w += K.positions(x + p + 1, n - p - 1, c.value, false, static_cast<int64_t>(p + 1), out + w);
  return w;
}

}  // namespace

Cut kth_largest(const float* x, std::size_t n, std::size_t k) {
  LAMINA_CHECK(k >= 1 && k <= n, "kth_largest: k must be in [1, n], got k=", k, ", n=", n);
  Workspace W;
  return find_cut(x, n, k, W, detail::row_kernels());
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
  const RowKernels& K = detail::row_kernels();
  const int nt = threads_for(n_rows * (n + 1), kMinPerThread, threads);
  std::vector<Workspace> ws(nt > 0 ? nt : 1);
  parallel_for(n_rows, nt, [&](std::size_t r, int worker) {
    int64_t* o = out + offsets[r];
    const std::size_t kr = static_cast<std::size_t>(k[r]);
    if (kr == n) {
      for (std::size_t j = 0; j < n; ++j) o[j] = static_cast<int64_t>(j);
    } else if (kr > 0) {
      Workspace& W = ws[worker];
      const float* x = scores + r * n;
      const Cut c = find_cut(x, n, kr, W, K);
      int64_t* stage = W.positions(kr);
      const std::size_t w = emit(x, n, c, stage, K);
      LAMINA_ASSERT(w == kr);
      std::memcpy(o, stage, kr * sizeof(int64_t));
    }
    for (std::size_t t = 0; t < tail; ++t) o[kr + t] = static_cast<int64_t>(n + t);
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
  const RowKernels& K = detail::row_kernels();
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
    const float* s = scores + l * N;
    const std::size_t f = floor ? static_cast<std::size_t>(floor[l]) : 0;
    if (f > 0) {  // pin each row's top f at +inf, above every finite score
      W.layer.assign(s, s + N);
      for (std::size_t g = 0; g < kv_heads; ++g) {
        float* row = W.layer.data() + g * n;
        if (f >= n) {
          std::fill(row, row + n, kInf);
          continue;
        }
        const Cut c = find_cut(s + g * n, n, f, W, K);
        int64_t* stage = W.positions(f);
        const std::size_t w = emit(s + g * n, n, c, stage, K);
        LAMINA_ASSERT(w == f);
        for (std::size_t i = 0; i < w; ++i) row[stage[i]] = kInf;
      }
      s = W.layer.data();
    }
    const Cut c = find_cut(s, N, tot, W, K);
    std::size_t eq_left = c.take_equal;
    for (std::size_t g = 0; g < kv_heads; ++g) {
      std::size_t gt, eq;
      K.count(s + g * n, n, c.value, &gt, &eq);
      const std::size_t take = std::min(eq, eq_left);
      eq_left -= take;
      cnt[g] = static_cast<int64_t>(gt + take);
    }
  });
}

}  // namespace lamina::kv
