// KV eviction: exact top-k thresholds, per-row selection, cross-head counts (lamina/kv.hpp).
//
// The k-th largest value of a row is found exactly with one streaming pass in the common case:
// a strided sample of 512 values brackets it between two sample order statistics (5-sigma
// margin), one SIMD pass counts the values above the bracket and packs the few inside it, and
// an MSD radix select on those finds the exact value. If the bracket misses (rare) or the row
// is short, the radix select runs on a copy of the whole row. A SIMD count pass gives the
// exact tie counts and a last SIMD pass writes the kept positions. The passes are the
// RowKernels of kv_internal.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
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
constexpr std::size_t kSample = 512;
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

// Order-preserving float <-> uint32 maps (finite floats; -0.0 maps like +0.0).
inline uint32_t to_key(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = u == 0x80000000u ? 0u : u;
  const uint32_t neg = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31);
  return u ^ (neg | 0x80000000u);
}
inline float from_key(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The need-th largest (1-based) of v[0..m), 1 <= need <= m; v is clobbered. MSD radix on
// order keys: each round histograms the 11 bits below the highest bit in which the
// remaining keys differ and keeps only the bucket holding the answer; nth_element finishes
// once at most 256 keys remain.
float select_value(float* v, std::size_t m, std::size_t need) {
  uint32_t* k = reinterpret_cast<uint32_t*>(v);  // same storage, converted in place
  for (std::size_t i = 0; i < m; ++i) k[i] = to_key(v[i]);
  uint32_t hist[1u << 11];
  while (m > 256) {
    uint32_t lo = k[0], hi = k[0];
    for (std::size_t i = 1; i < m; ++i) {
      lo = std::min(lo, k[i]);
      hi = std::max(hi, k[i]);
    }
    if (lo == hi) return from_key(lo);
    const int top = 31 - __builtin_clz(lo ^ hi);
    const int shift = std::max(0, top - 10);
    const uint32_t mask = (2u << (top - shift)) - 1u;
    std::fill(hist, hist + mask + 1, 0u);
    for (std::size_t i = 0; i < m; ++i) ++hist[(k[i] >> shift) & mask];
    uint32_t b = mask;
    std::size_t above = 0;
    while (above + hist[b] < need) above += hist[b--];
    std::size_t w = 0;
    for (std::size_t i = 0; i < m; ++i)
      if (((k[i] >> shift) & mask) == b) k[w++] = k[i];
    m = w;
    need -= above;
  }
  std::nth_element(k, k + (need - 1), k + m, std::greater<uint32_t>());
  return from_key(k[need - 1]);
}

Cut exact_cut(const float* x, std::size_t n, std::size_t k, Workspace& W, const RowKernels& K) {
  float* b = W.floats(n);
  std::copy(x, x + n, b);
  Cut c;
  c.value = select_value(b, n, k);
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
  const double d = 5.0 * std::sqrt(q * (1.0 - q / kSample)) + 4.0;
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
    Cut c;
    c.value = select_value(b, m, k - above);
    std::size_t gt, eq;
    K.count(x, n, c.value, &gt, &eq);  // exact counts over the row (cheap SIMD pass)
    c.greater = gt;
    c.take_equal = k - gt;
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

namespace detail {

struct SelectScratch {
  Workspace w;
};

void SelectScratchDeleter::operator()(SelectScratch* p) const { delete p; }
SelectScratchPtr make_select_scratch() { return SelectScratchPtr(new SelectScratch()); }

void check_select_args(std::size_t n_rows, std::size_t n, const int64_t* k, std::size_t tail,
                       const int64_t* offsets) {
  for (std::size_t r = 0; r < n_rows; ++r) {
    LAMINA_CHECK(k[r] >= 0 && static_cast<std::size_t>(k[r]) <= n, "select_rows: k[", r,
                 "] = ", k[r], " is outside [0, ", n, "]");
    LAMINA_CHECK(offsets[r + 1] - offsets[r] == k[r] + static_cast<int64_t>(tail),
                 "select_rows: offsets do not match k + tail at row ", r);
  }
}

void select_row(const float* x, std::size_t n, std::size_t k, std::size_t tail, int64_t* out,
                SelectScratch& scratch) {
  if (k == n) {
    for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<int64_t>(j);
  } else if (k > 0) {
    const RowKernels& K = row_kernels();
    Workspace& W = scratch.w;
    const Cut c = find_cut(x, n, k, W, K);
    int64_t* stage = W.positions(k);
    const std::size_t w = emit(x, n, c, stage, K);
    LAMINA_ASSERT(w == k);
    std::memcpy(out, stage, k * sizeof(int64_t));
  }
  for (std::size_t t = 0; t < tail; ++t) out[k + t] = static_cast<int64_t>(n + t);
}

}  // namespace detail

void select_rows(const float* scores, std::size_t n_rows, std::size_t n, const int64_t* k,
                 std::size_t tail, const int64_t* offsets, int64_t* out, int threads) {
  detail::check_select_args(n_rows, n, k, tail, offsets);
  bool need_scores = false;
  for (std::size_t r = 0; r < n_rows; ++r)
    if (k[r] > 0 && static_cast<std::size_t>(k[r]) < n) need_scores = true;
  LAMINA_CHECK(!need_scores || scores != nullptr, "select_rows: scores are required");
  const int nt = threads_for(n_rows * (n + 1), kMinPerThread, threads);
  std::vector<detail::SelectScratch> ws(nt > 0 ? nt : 1);
  parallel_for(n_rows, nt, [&](std::size_t r, int worker) {
    detail::select_row(scores ? scores + r * n : nullptr, n, static_cast<std::size_t>(k[r]), tail,
                       out + offsets[r], ws[worker]);
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
