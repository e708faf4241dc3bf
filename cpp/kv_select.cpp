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
  std::vector<float> cvals;   // collected candidates (values >= the bracket's low end)
  std::vector<int32_t> cpos;  // and their positions
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

// The value of rank r (0-based, descending) among s[0..m), r < m: the value
// nth_element(s, s + r, s + m, greater) leaves at s[r] (a -0.0 there may come out as +0.0 or
// the reverse; they compare equal, which is all callers use). s may be reordered. Small ranks
// (the sample thresholds of the selections) keep the r + 1 largest in a sorted buffer: after
// the first few hundred values almost none enters, so the scan is predictable, unlike
// nth_element's partitioning.
float rank_desc(float* s, std::size_t m, std::size_t r) {
  constexpr std::size_t kTopMax = 64;
  if (r >= kTopMax) {
    std::nth_element(s, s + r, s + m, std::greater<float>());
    return s[r];
  }
  float top[kTopMax];  // descending, top[0..c)
  std::size_t c = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const float v = s[i];
    std::size_t j;
    if (c <= r) {
      j = c++;
    } else if (v > top[r]) {
      j = r;  // drops the current top[r]
    } else {
      continue;
    }
    while (j > 0 && top[j - 1] < v) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = v;
  }
  return top[r];
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

// The bracket of find_cut from a strided sample of x: lo <= k-th largest <= hi (when the
// sample does not mislead; callers verify). hi is +inf when the k-th largest is so close to
// the top that the sample cannot bound it from above.
void sample_bracket(const float* x, std::size_t n, std::size_t k, float* lo, float* hi) {
  float sample[kSample];
  for (std::size_t i = 0; i < kSample; ++i) sample[i] = x[(i * n) / kSample];
  const double q = static_cast<double>(k) * kSample / static_cast<double>(n);
  const double d = 5.0 * std::sqrt(q * (1.0 - q / kSample)) + 4.0;
  const long r_hi = static_cast<long>(std::floor(q - d));
  const long r_lo = static_cast<long>(std::ceil(q + d));
  *lo = -kInf;
  *hi = kInf;
  if (r_lo < static_cast<long>(kSample))
    *lo = rank_desc(sample, kSample, static_cast<std::size_t>(r_lo));
  if (r_hi >= 0) *hi = rank_desc(sample, kSample, static_cast<std::size_t>(r_hi));
}

Cut find_cut(const float* x, std::size_t n, std::size_t k, Workspace& W, const RowKernels& K) {
  LAMINA_ASSERT(k >= 1 && k <= n);
  if (n <= kExactBelow) return exact_cut(x, n, k, W, K);
  float lo, hi;
  sample_bracket(x, n, k, &lo, &hi);
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

// Per row g of the kv_heads rows of n scores at s (one layer, rows contiguous): the entries
// the layer-wide cut keeps, cnt[g] — those above it, and of those equal to it the first
// c.take_equal in row order.
void counts_at_cut(const float* s, std::size_t kv_heads, std::size_t n, const Cut& c, int64_t* cnt,
                   const RowKernels& K) {
  std::size_t eq_left = c.take_equal;
  for (std::size_t g = 0; g < kv_heads; ++g) {
    std::size_t gt, eq;
    K.count(s + g * n, n, c.value, &gt, &eq);
    const std::size_t take = std::min(eq, eq_left);
    eq_left -= take;
    cnt[g] = static_cast<int64_t>(gt + take);
  }
}

// The k best of x[0..n) (ascending positions) written to out[0..k), when the k-th largest
// is near the top of the row: one SIMD pass collects every value >= the sample's low bracket
// end with its position (a few percent of the row), the cut is found among those, and the
// kept positions are read off the collected list, which is in position order. Same result
// as find_cut + emit. Returns false (nothing written) when the sample gives an upper bracket
// end (k is a large share of n: the band path is cheaper) or misled (fewer than k collected).
bool select_collected(const float* x, std::size_t n, std::size_t k, Workspace& W,
                      const RowKernels& K, int64_t* out) {
  if (n <= kExactBelow || n > static_cast<std::size_t>(INT32_MAX)) return false;
  float lo, hi;
  sample_bracket(x, n, k, &lo, &hi);
  if (hi != kInf || lo == -kInf) return false;
  if (W.cvals.size() < n + kSlack) {
    W.cvals.resize(n + kSlack);
    W.cpos.resize(n + kSlack);
  }
  float* v = W.cvals.data();
  const int32_t* p = W.cpos.data();
  const std::size_t m = K.collect(x, n, lo, v, W.cpos.data());
  if (m < k) return false;
  float* b = W.floats(m);
  std::copy(v, v + m, b);
  const float cut = select_value(b, m, k);
  std::size_t gt, eq;
  K.count(v, m, cut, &gt, &eq);  // every value >= cut was collected: row-wide counts
  std::size_t take_equal = k - gt, w = 0;
  for (std::size_t i = 0; i < m && w < k; ++i) {  // out has exactly k slots
    const float y = v[i];
    const bool tie = y == cut && take_equal > 0;
    take_equal -= tie;
    out[w] = p[i];
    w += (y > cut) | tie;
  }
  LAMINA_ASSERT(w == k);
  return true;
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
    if (select_collected(x, n, k, W, K, out)) {
      for (std::size_t t = 0; t < tail; ++t) out[k + t] = static_cast<int64_t>(n + t);
      return;
    }
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

void apportion(const double* weights, std::size_t m, int64_t total, int64_t cap, int64_t* out) {
  LAMINA_CHECK(total >= 0 && cap >= 0 && total <= static_cast<int64_t>(m) * cap,
               "cannot split ", total, " into ", m, " parts of at most ", cap);
  if (m == 0) return;
  std::vector<double> w(m), x(m, 0.0), rem(m);
  std::vector<char> free_(m, 1);
  for (std::size_t i = 0; i < m; ++i) w[i] = weights[i] > 0.0 ? weights[i] : 0.0;
  double remaining = static_cast<double>(total);
  const double capd = static_cast<double>(cap);
  for (;;) {
    double s = 0.0;
    std::size_t nf = 0;
    for (std::size_t i = 0; i < m; ++i)
      if (free_[i]) {
        s += w[i];
        ++nf;
      }
    bool any_over = false;
    for (std::size_t i = 0; i < m; ++i)
      if (free_[i]) {
        const double share = remaining * (s > 0.0 ? w[i] / s : 1.0 / static_cast<double>(nf));
        x[i] = share;
        any_over |= share > capd;
      }
    if (!any_over) break;
    std::size_t clamped = 0;
    for (std::size_t i = 0; i < m; ++i)
      if (free_[i] && x[i] > capd) {
        x[i] = capd;
        free_[i] = 0;
        ++clamped;
      }
    remaining -= capd * static_cast<double>(clamped);
    if (clamped == nf) break;
  }
  int64_t sum = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const double near = std::nearbyint(x[i]);
    const double xi = std::fabs(x[i] - near) < 1e-9 ? near : x[i];
    const double b = std::min(std::max(std::floor(xi), 0.0), capd);
    out[i] = static_cast<int64_t>(b);
    sum += out[i];
    rem[i] = std::nearbyint((xi - b) * 1e9);  // numpy.round(x - base, 9), scaled
  }
  std::vector<std::size_t> order(m);
  for (std::size_t i = 0; i < m; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rem[a] > rem[b]; });
  int64_t d = total - sum;
  for (std::size_t t = 0; t < m && d > 0; ++t)
    if (out[order[t]] < cap) {
      ++out[order[t]];
      --d;
    }
  for (std::size_t t = m; t-- > 0 && d < 0;)
    if (out[order[t]] > 0) {
      --out[order[t]];
      ++d;
    }
  LAMINA_ASSERT(d == 0);
}

namespace detail {

struct LavaScratch {
  Workspace w;
  std::vector<float> v;
  std::vector<int32_t> p;
  std::vector<std::size_t> seg;  // row g's candidates are v / p [seg[g], seg[g + 1])
  std::vector<std::size_t> eq;   // per row: candidates equal to the layer's cut
  std::vector<std::size_t> ge;   // per row: candidates >= the layer's cut
  float cut = 0.0f;              // the layer's cut (valid with the counts)
  SelectScratch scratch;
  std::vector<double> mixed;
};
void LavaScratchDeleter::operator()(LavaScratch* p) const { delete p; }
LavaScratchPtr make_lava_scratch() { return LavaScratchPtr(new LavaScratch()); }
std::size_t scratch_bytes(const LavaScratch& s) {
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  const Workspace& w = s.w;
  const Workspace& x = s.scratch.w;
  return b(s.v) + b(s.p) + b(s.seg) + b(s.eq) + b(s.mixed) + b(w.buf) + b(w.cvals) +
         b(w.cpos) + b(w.layer) + b(w.pos) + b(x.buf) + b(x.cvals) + b(x.cpos) + b(x.layer) +
         b(x.pos);
}

namespace {

// Row bounds of the collected candidates W.v / W.p [0, m) (flat positions g * n + j,
// ascending) into W.seg.
void segment_rows(std::size_t kv_heads, std::size_t n, std::size_t m, LavaScratch& W) {
  W.seg.resize(kv_heads + 1);
  W.seg[0] = 0;
  for (std::size_t g = 1; g < kv_heads; ++g)
    W.seg[g] = static_cast<std::size_t>(
        std::lower_bound(W.p.data() + W.seg[g - 1], W.p.data() + m,
                         static_cast<int32_t>(g * n)) -
        W.p.data());
  W.seg[kv_heads] = m;
}

// counts of the layer's global top `tot` from the collected candidates (rows W.seg), which
// hold every entry >= their cut: per row the entries above the cut, then the first
// `take_equal` ties in flat order, as in layer_head_counts.
void counts_from_collected(std::size_t kv_heads, std::size_t tot, float cut, int64_t* cnt,
                           LavaScratch& W, const RowKernels& K) {
  std::size_t gt_all = 0;
  W.eq.resize(kv_heads);
  W.ge.resize(kv_heads);
  W.cut = cut;
  for (std::size_t g = 0; g < kv_heads; ++g) {
    std::size_t gt;
    K.count(W.v.data() + W.seg[g], W.seg[g + 1] - W.seg[g], cut, &gt, &W.eq[g]);
    cnt[g] = static_cast<int64_t>(gt);
    W.ge[g] = gt + W.eq[g];
    gt_all += gt;
  }
  std::size_t take_equal = tot - gt_all;
  for (std::size_t g = 0; g < kv_heads; ++g) {
    const std::size_t take = std::min(W.eq[g], take_equal);
    cnt[g] += static_cast<int64_t>(take);
    take_equal -= take;
  }
}

// Head budgets from the counts, then each row's top k_g written to out (rows in order, each
// followed by the tail; tot + kv_heads * tail entries): from the row's collected candidates
// W.v / W.p [W.seg[g], W.seg[g + 1]) when they are at least k_g (then the row's k_g-th largest
// is >= the row's collection threshold, so every kept entry was collected, in position
// order), else from the row's scores, row(g).
void lava_rows(std::size_t kv_heads, std::size_t n, std::size_t b, double alpha,
               std::size_t tail, const int64_t* cnt, int64_t* hb, int64_t* out, LavaScratch& W,
               bool have_candidates, const std::function<const float*(std::size_t)>& row,
               const RowKernels& K) {
  const std::size_t tot = kv_heads * b;
  W.mixed.resize(kv_heads);
  for (std::size_t g = 0; g < kv_heads; ++g)
    W.mixed[g] = (1.0 - alpha) * static_cast<double>(cnt[g]) + alpha * static_cast<double>(b);
  apportion(W.mixed.data(), kv_heads, static_cast<int64_t>(tot), static_cast<int64_t>(n), hb);

  for (std::size_t g = 0; g < kv_heads; ++g) {
    const std::size_t k = static_cast<std::size_t>(hb[g]);
    int64_t* o = out;
    out += k + tail;
    const std::size_t c0 = have_candidates ? W.seg[g] : 0;
    const std::size_t c1 = have_candidates ? W.seg[g + 1] : 0;
    const std::size_t mr = c1 - c0;
    if (k > 0 && k < n && mr >= k) {
      // the row's k-th largest candidate: among those >= the layer's cut when it is one of
      // them (k <= ge), else the (k - ge)-th largest of those below the cut
      float* bb = W.w.floats(mr);
      const std::size_t ge = W.ge[g];
      std::size_t mm, need, above;
      if (k <= ge) {
        mm = K.band(W.v.data() + c0, mr, W.cut, kInf, bb, &above);
        need = k;
      } else {
        mm = K.band(W.v.data() + c0, mr, -kInf, std::nextafter(W.cut, -kInf), bb, &above);
        need = k - ge;
      }
      LAMINA_ASSERT(need >= 1 && need <= mm);
      const float cut = select_value(bb, mm, need);
      std::size_t gt, eq;
      K.count(W.v.data() + c0, mr, cut, &gt, &eq);
      std::size_t take_equal = k - gt, w = 0;
      const int64_t base = static_cast<int64_t>(g * n);
      for (std::size_t i = c0; i < c1 && w < k; ++i) {
        const float y = W.v[i];
        const bool tie = y == cut && take_equal > 0;
        take_equal -= tie;
        o[w] = W.p[i] - base;
        w += (y > cut) | tie;
      }
      LAMINA_ASSERT(w == k);
      for (std::size_t t = 0; t < tail; ++t) o[k + t] = static_cast<int64_t>(n + t);
    } else {
      select_row(k > 0 && k < n ? row(g) : nullptr, n, k, tail, o, W.scratch);
    }
  }
}

}  // namespace

void lava_layer(const float* s, std::size_t kv_heads, std::size_t n, std::size_t b, double alpha,
                std::size_t tail, int64_t* cnt, int64_t* hb, int64_t* out, LavaScratch& W) {
  const RowKernels& K = row_kernels();
  const std::size_t N = kv_heads * n, tot = kv_heads * b;
  bool have = false;  // collected candidates (values >= the sample's low end, flat positions)
  if (tot == 0 || tot == N) {
    for (std::size_t g = 0; g < kv_heads; ++g) cnt[g] = static_cast<int64_t>(b);
  } else {
    float lo = -kInf, hi = kInf;
    bool ok = N > kExactBelow && N <= static_cast<std::size_t>(INT32_MAX);
    if (ok) {
      sample_bracket(s, N, tot, &lo, &hi);
      ok = hi == kInf && lo != -kInf;
    }
    std::size_t m = 0;
    if (ok) {
      if (W.v.size() < N + kSlack) {
        W.v.resize(N + kSlack);
        W.p.resize(N + kSlack);
      }
      m = K.collect(s, N, lo, W.v.data(), W.p.data());
      ok = m >= tot;
    }
    if (ok) {  // global cut among the candidates; counts from their flat positions
      float* bb = W.w.floats(m);
      std::copy(W.v.data(), W.v.data() + m, bb);
      const float cut = select_value(bb, m, tot);
      segment_rows(kv_heads, n, m, W);
      counts_from_collected(kv_heads, tot, cut, cnt, W, K);
      have = true;
    } else {  // the sample misled or the budget is a large share: the general cut
      counts_at_cut(s, kv_heads, n, find_cut(s, N, tot, W.w, K), cnt, K);
    }
  }
  lava_rows(kv_heads, n, b, alpha, tail, cnt, hb, out, W, have,
            [&](std::size_t g) { return s + g * n; }, K);
}

void row_candidates(const float* x, std::size_t n, std::size_t want, std::size_t at_least,
                    std::size_t cap, float* vals, int32_t* pos, RowCandidates& c,
                    LavaScratch& W, const float* prefetch, std::size_t prefetch_n) {
  c.valid = false;
  c.m = 0;
  if (n <= kExactBelow || n > static_cast<std::size_t>(INT32_MAX) || want == 0 ||
      4 * want > n || cap < want)
    return;
  float sample[kSample];
  for (std::size_t i = 0; i < kSample; ++i) sample[i] = x[(i * n) / kSample];
  std::size_t r = (want * kSample + n - 1) / n;  // < kSample / 4
  float lo = rank_desc(sample, kSample, r);
  if (W.v.size() < n + kSlack) {
    W.v.resize(n + kSlack);
    W.p.resize(n + kSlack);
  }
  const RowKernels& K = row_kernels();
  // collect in chunks; between them (first pass only), prefetch an equal share of the
  // caller's next input, so that memory streams while this pass computes on cached data
  // (chunks of kChunk, a multiple of every ISA's vector width: the same entries as one call)
  auto collect = [&](bool pf) {
    constexpr std::size_t kChunk = 2048;
    std::size_t m = 0;
    const std::size_t chunks = (n + kChunk - 1) / kChunk;
    const std::size_t pf_step = pf && chunks ? (prefetch_n + chunks - 1) / chunks : 0;
    for (std::size_t j0 = 0, pf0 = 0; j0 < n; j0 += kChunk) {
      const std::size_t len = std::min(kChunk, n - j0);
      const std::size_t got = K.collect(x + j0, len, lo, W.v.data() + m, W.p.data() + m);
      if (j0 > 0)
        for (std::size_t i = m; i < m + got; ++i) W.p[i] += static_cast<int32_t>(j0);
      m += got;
#if defined(__GNUC__) || defined(__clang__)
      if (pf && prefetch) {
        const std::size_t pf1 = std::min(prefetch_n, pf0 + pf_step);
        for (; pf0 < pf1; pf0 += 64 / sizeof(float)) __builtin_prefetch(prefetch + pf0, 0, 1);
      }
#endif
    }
    return m;
  };
  std::size_t m = collect(true);
  // A sample order statistic misses its target count by ~1 / sqrt(r) (20% at r ~ 20). Rows
  // left with fewer than `at_least` are collected again (from cache) at a lower sample rank
  // scaled by the shortfall: a short row would otherwise send its layer, or itself, back to
  // the input in the second pass.
  for (int again = 0; again < 2 && m < at_least && r + 1 < kSample; ++again) {
    r = std::min(kSample - 1, ((r + 1) * want + m) / std::max<std::size_t>(m, 1) + 1);
    lo = rank_desc(sample, kSample, r);
    m = collect(false);
  }
  if (m > cap) return;
  std::copy(W.v.data(), W.v.data() + m, vals);
  std::copy(W.p.data(), W.p.data() + m, pos);
  c.vals = vals;
  c.pos = pos;
  c.m = m;
  c.lo = lo;
  c.valid = true;
}

bool lava_layer_candidates(const RowCandidates* rows, std::size_t kv_heads, std::size_t n,
                           std::size_t b, double alpha, std::size_t tail, int64_t* cnt,
                           int64_t* hb, int64_t* out, LavaScratch& W,
                           const std::function<const float*(std::size_t)>& row) {
  const RowKernels& K = row_kernels();
  const std::size_t N = kv_heads * n, tot = kv_heads * b;
  if (tot == 0 || tot == N || N > static_cast<std::size_t>(INT32_MAX)) return false;
  std::size_t m = 0;
  float lo_max = -kInf;
  for (std::size_t g = 0; g < kv_heads; ++g) {
    if (!rows[g].valid) return false;
    m += rows[g].m;
    lo_max = std::max(lo_max, rows[g].lo);
  }
  if (m < tot) return false;
  if (W.v.size() < m + kSlack) {
    W.v.resize(m + kSlack);
    W.p.resize(m + kSlack);
  }
  W.seg.resize(kv_heads + 1);
  std::size_t at = 0;
  for (std::size_t g = 0; g < kv_heads; ++g) {  // the layer's candidates in flat order
    const RowCandidates& c = rows[g];
    const int32_t base = static_cast<int32_t>(g * n);
    W.seg[g] = at;
    std::copy(c.vals, c.vals + c.m, W.v.data() + at);
    for (std::size_t i = 0; i < c.m; ++i) W.p[at + i] = c.pos[i] + base;
    at += c.m;
  }
  W.seg[kv_heads] = at;
  // every entry >= the cut was collected only if no row's threshold lies above the cut, i.e.
  // if at least tot candidates are >= lo_max; the cut is then found among those
  float* bb = W.w.floats(m);
  std::size_t above;
  const std::size_t m_hi = K.band(W.v.data(), m, lo_max, kInf, bb, &above);
  if (m_hi < tot) return false;
  const float cut = select_value(bb, m_hi, tot);
  counts_from_collected(kv_heads, tot, cut, cnt, W, K);
  lava_rows(kv_heads, n, b, alpha, tail, cnt, hb, out, W, true, row, K);
  return true;
}

void lava_offsets(std::size_t rows, std::size_t tail, const int64_t* head_budgets,
                  int64_t* offsets) {
  offsets[0] = 0;
  for (std::size_t r = 0; r < rows; ++r)
    offsets[r + 1] = offsets[r] + head_budgets[r] + static_cast<int64_t>(tail);
}

}  // namespace detail

void lava_layers(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                 const int64_t* layer_budget, double alpha, std::size_t tail, int64_t* counts,
                 int64_t* head_budgets, int64_t* offsets, int64_t* out, int threads) {
  LAMINA_CHECK(alpha >= 0.0 && alpha <= 1.0, "lava_layers: alpha must be in [0, 1], got ", alpha);
  for (std::size_t l = 0; l < layers; ++l)
    LAMINA_CHECK(layer_budget[l] >= 0 && static_cast<std::size_t>(layer_budget[l]) <= n,
                 "lava_layers: layer_budget[", l, "] = ", layer_budget[l], " is outside [0, ",
                 n, "]");
  const std::size_t N = kv_heads * n;
  // layer l's kept positions start after those of the layers before it (each keeps
  // H_kv * (layer_budget + tail))
  std::vector<int64_t> start(layers + 1, 0);
  for (std::size_t l = 0; l < layers; ++l)
    start[l + 1] = start[l] + static_cast<int64_t>(kv_heads) *
                                  (layer_budget[l] + static_cast<int64_t>(tail));
  const int nt = threads_for(layers * (N + 1), kMinPerThread, threads);
  std::vector<detail::LavaScratchPtr> ws(nt > 0 ? nt : 1);
  for (auto& w : ws) w = detail::make_lava_scratch();
  parallel_for(layers, nt, [&](std::size_t l, int worker) {
    detail::lava_layer(scores + l * N, kv_heads, n, static_cast<std::size_t>(layer_budget[l]),
                       alpha, tail, counts + l * kv_heads, head_budgets + l * kv_heads,
                       out + start[l], *ws[worker]);
  });
  detail::lava_offsets(layers * kv_heads, tail, head_budgets, offsets);
}

bool check_head_counts(std::size_t layers, std::size_t kv_heads, std::size_t n,
                       const int64_t* total, const int64_t* floor) {
  const std::size_t N = kv_heads * n;
  bool need = false;
  for (std::size_t l = 0; l < layers; ++l) {
    const int64_t f = floor ? floor[l] : 0;
    LAMINA_CHECK(f >= 0 && static_cast<std::size_t>(f) <= n, "layer_head_counts: floor[", l,
                 "] = ", f, " is outside [0, ", n, "]");
    LAMINA_CHECK(total[l] >= f * static_cast<int64_t>(kv_heads) &&
                     static_cast<std::size_t>(total[l]) <= N,
                 "layer_head_counts: total[", l, "] = ", total[l], " is outside [",
                 f * static_cast<int64_t>(kv_heads), ", ", N, "]");
    if (total[l] != 0 && static_cast<std::size_t>(total[l]) != N) need = true;
  }
  return need;
}

void layer_head_counts(const float* scores, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, const int64_t* total, const int64_t* floor,
                       int64_t* counts, int threads) {
  check_head_counts(layers, kv_heads, n, total, floor);
  const std::size_t N = kv_heads * n;
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
    counts_at_cut(s, kv_heads, n, find_cut(s, N, tot, W, K), cnt, K);
  });
}

}  // namespace lamina::kv
