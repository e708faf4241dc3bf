// KV eviction: score rows, layer entropy, value norms, gather (see lamina/kv.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kv_internal.hpp"
#include "lamina/common.hpp"
#include "lamina/isa.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/kv.hpp"
#include "lamina/parallel.hpp"

namespace lamina::kv {

namespace {

// The per-row loops below are written once and compiled three times: plain (baseline ISA)
// and inside functions carrying GCC/Clang `target("avx2")` / `target("avx512f")` attributes,
// into which they are force-inlined and auto-vectorised; a family of lamina/isa.hpp
// (kScoreLoops) that follows the KV kernels' selector (kv_internal.hpp, so
// _core.kv_simd_isa switches it too). No per-file flags, no -march=native.
#if defined(__GNUC__) || defined(__clang__)
#define LAMINA_KV_INLINE inline __attribute__((always_inline))
#else
#define LAMINA_KV_INLINE inline
#endif

constexpr std::size_t kChunk = 2048;              // window-reduce block (stays in L1)
constexpr std::size_t kMinPerThread = 1 << 15;

// Reductions run over kLanes independent partial results combined at the end: strict IEEE
// float code (no -ffast-math) is only vectorised when the order is written out like this, and
// the result is then the same on every ISA.
constexpr std::size_t kLanes = 16;

// True when no x[i] is NaN or +-Inf (exponent bits all ones); integer OR, so it vectorises.
LAMINA_KV_INLINE bool all_finite(const float* x, std::size_t n) {
  uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// Order-preserving integer keys of finite floats (unsigned min/max reductions vectorise
// without -ffast-math; float compares-and-selects do not); -0.0 sorts below +0.0.
LAMINA_KV_INLINE uint32_t order_key(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
}
LAMINA_KV_INLINE float from_order_key(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// Exact division by a small integer d: q = x * r (r = RN(1/d)), e = x - q * d (exact with an
// FMA), q' = e == 0 ? q : RN(q + e * r) (Markstein's correction). For the d with
// exact_divisor(d) -- odd d <= 33 and powers of two <= 32 -- this equals the IEEE quotient
// x / d bit for bit for every float x (checked exhaustively over all 2^32 bit patterns by
// bench/check_exact_division.cpp; e == 0 keeps -0.0 / d == -0.0). Even d that are not powers
// of two (6, 10, 12, ...) are NOT exact (subnormal quotients differ) and keep the divide.
// Three multiply-adds instead of a divide (a 512-bit divide issues once every ~10 cycles).
// kIsa: 0 baseline (plain division: no FMA there), 1 AVX2 (+FMA), 2 AVX-512F.
inline bool exact_divisor(float d) {
  if (!(d >= 1.0f && d <= 33.0f) || d != std::floor(d)) return false;
  const unsigned u = static_cast<unsigned>(d);
  return (u & 1u) != 0 || (u & (u - 1u)) == 0;  // odd or a power of two
}
#if defined(LAMINA_ISA_TARGETS)
__attribute__((target("avx2,fma"))) void div_exact_avx2(float* o, std::size_t m, float d,
                                                        float r) {
  for (std::size_t i = 0; i < m; ++i) {
    const float x = o[i], q = x * r, e = std::fma(-q, d, x);
    o[i] = e == 0.0f ? q : std::fma(e, r, q);
  }
}
#endif
template <int kIsa>
LAMINA_KV_INLINE void div_by(float* o, std::size_t m, float d) {
#if defined(LAMINA_ISA_TARGETS)
  if (kIsa > 0 && exact_divisor(d)) {
    const float r = 1.0f / d;
    if (kIsa == 1) {
      div_exact_avx2(o, m, d, r);
      return;
    }
    for (std::size_t i = 0; i < m; ++i) {
      const float x = o[i], q = x * r, e = std::fma(-q, d, x);
      o[i] = e == 0.0f ? q : std::fma(e, r, q);
    }
    return;
  }
#endif
  for (std::size_t i = 0; i < m; ++i) o[i] /= d;
}

// out[i] = max or ordered sum of base[i .. i + K) for i < m, in registers (one pass, K loads
// per output): the same operations in the same order as the k-pass form below.
template <std::size_t K, bool kMax>
LAMINA_KV_INLINE void pool_fixed(const float* __restrict base, std::size_t m,
                                 float* __restrict o) {
  for (std::size_t i = 0; i < m; ++i) {
    float s = base[i];
    for (std::size_t d = 1; d < K; ++d) {
      const float v = base[i + d];
      s = kMax ? (v > s ? v : s) : s + v;
    }
    o[i] = s;
  }
}

// 1-D pooling of a[0..n) with kernel k (odd), stride 1, padding k/2, for the output positions
// [j0, j1) only, written to out[0 .. j1 - j0). Per position, the same operations in the same
// order whatever the block bounds: Max: m = a[lo], then m = a[i] > m ? a[i] : m for ascending
// in-range i; Avg: s = a[lo] + ... (ascending, in range) / k. Blocks of kBlock outputs keep
// the k passes over the block in L1; the usual kernels (3 to 9) run in one pass.
template <int kIsa>
LAMINA_KV_INLINE void pool_block(const float* a, std::size_t n, std::size_t k, bool is_max,
                                 std::size_t j0, std::size_t j1, float* out) {
  const std::size_t r = k / 2;
  const float kf = static_cast<float>(k);
  auto edge = [&](std::size_t j) {
    const std::size_t lo = j >= r ? j - r : 0, hi = std::min(n - 1, j + r);
    float m = a[lo];
    if (is_max) {
      for (std::size_t i = lo + 1; i <= hi; ++i) m = a[i] > m ? a[i] : m;
    } else {
      for (std::size_t i = lo + 1; i <= hi; ++i) m += a[i];
      m /= kf;
    }
    out[j - j0] = m;
  };
  // interior positions r <= j < n - r have all k inputs in range
  const std::size_t i0 = std::max(j0, r), i1 = n > 2 * r ? std::min(j1, n - r) : 0;
  if (i0 >= i1) {
    for (std::size_t j = j0; j < j1; ++j) edge(j);
    return;
  }
  for (std::size_t j = j0; j < i0; ++j) edge(j);
  const std::size_t m = i1 - i0;
  float* o = out + (i0 - j0);
  const float* base = a + (i0 - r);
  auto fixed = [&](auto kmax) {
    constexpr bool mx = decltype(kmax)::value;
    switch (k) {
      case 3: pool_fixed<3, mx>(base, m, o); return true;
      case 5: pool_fixed<5, mx>(base, m, o); return true;
      case 7: pool_fixed<7, mx>(base, m, o); return true;
      case 9: pool_fixed<9, mx>(base, m, o); return true;
      default: return false;
    }
  };
  const bool done = is_max ? fixed(std::true_type{}) : fixed(std::false_type{});
  if (!done) {
    std::memcpy(o, base, m * sizeof(float));
    if (is_max) {
      for (std::size_t d = 1; d < k; ++d) {
        const float* src = base + d;
        for (std::size_t i = 0; i < m; ++i) o[i] = src[i] > o[i] ? src[i] : o[i];
      }
    } else {
      for (std::size_t d = 1; d < k; ++d) {
        const float* src = base + d;
        for (std::size_t i = 0; i < m; ++i) o[i] += src[i];
      }
    }
  }
  if (!is_max) div_by<kIsa>(o, m, kf);
  for (std::size_t j = i1; j < j1; ++j) edge(j);
}

// Entropy sums of one block x[0..len), len <= kEntropyBlock, added to the running totals:
// float partial sums over kLanes lanes (lane l takes the x[i] with i = l mod kLanes of the
// full groups of kLanes, lane 0 then the rest in order), combined into the doubles lane by
// lane; *mn_key = min(*mn_key, order keys of the block). Whole rows are summed block by block
// (entropy_sums), window_scores sums each block while it is in L1: the same arithmetic.
constexpr std::size_t kEntropyBlock = 1024;  // multiple of kLanes
#if defined(__GNUC__) || defined(__clang__)
typedef float LaneVec __attribute__((vector_size(kLanes * sizeof(float))));
#endif
LAMINA_KV_INLINE void entropy_block(const float* x, std::size_t len, double* zd, double* sd,
                                    uint32_t* mn_key) {
  uint32_t lo = *mn_key;
  for (std::size_t i = 0; i < len; ++i) {
    const uint32_t k = order_key(x[i]);
    lo = k < lo ? k : lo;
  }
  *mn_key = lo;
  float t[kEntropyBlock];
  for (std::size_t i = 0; i < len; ++i) {  // elementwise: vectorises
    // s log s with log's argument raised to FLT_MIN (integer max on the bit pattern of a
    // non-negative float): 0 log 0 = 0 exactly, a subnormal s contributes below 1e-36.
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    u = u > 0x00800000u ? u : 0x00800000u;
    float xl;
    std::memcpy(&xl, &u, sizeof xl);
    t[i] = x[i] * kmath::fast_logf(xl);
  }
  float zl[kLanes], sl[kLanes];
  std::size_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
  // one vector register (or two / four) per accumulator: the element loop below is what
  // this computes, but compilers vectorise it badly (across i instead of across lanes)
  LaneVec zv = {}, sv = {};
  for (; i + kLanes <= len; i += kLanes) {
    LaneVec a, b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, t + i, sizeof b);
    zv += a;
    sv += b;
  }
  std::memcpy(zl, &zv, sizeof zl);
  std::memcpy(sl, &sv, sizeof sl);
#else
  for (std::size_t l = 0; l < kLanes; ++l) zl[l] = sl[l] = 0.0f;
  for (; i + kLanes <= len; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      zl[l] += x[i + l];
      sl[l] += t[i + l];
    }
#endif
  for (; i < len; ++i) {
    zl[0] += x[i];
    sl[0] += t[i];
  }
  double z = *zd, sdd = *sd;
  for (std::size_t l = 0; l < kLanes; ++l) {
    z += zl[l];
    sdd += sl[l];
  }
  *zd = z;
  *sd = sdd;
}

// z = sum s, slogs = sum s log s, mn = min s (0 when N = 0): entropy_block over blocks of
// kEntropyBlock.
LAMINA_KV_INLINE void entropy_sums(const float* s, std::size_t N, double* z, double* slogs,
                                   float* mn) {
  double zd = 0.0, sd = 0.0;
  uint32_t lo = 0xffffffffu;
  for (std::size_t b = 0; b < N; b += kEntropyBlock)
    entropy_block(s + b, std::min(N - b, kEntropyBlock), &zd, &sd, &lo);
  *z = zd;
  *slogs = sd;
  *mn = N ? from_order_key(lo) : 0.0f;
}

// Prefetches the cache lines of x[0..m) (a hint: no effect on results); kLocality as in
// __builtin_prefetch (3: all levels, 1: L2 and beyond).
template <int kLocality>
LAMINA_KV_INLINE void prefetch_lines(const float* x, std::size_t m) {
#if defined(__GNUC__) || defined(__clang__)
  for (std::size_t i = 0; i < m; i += 64 / sizeof(float)) __builtin_prefetch(x + i, 0, kLocality);
#else
  (void)x;
  (void)m;
#endif
}

struct RowBuffers {
  std::vector<float> reduced;
};

constexpr std::size_t kBlock = 1024;  // score_row's block (4 KiB: pooling passes stay in L1)
constexpr std::size_t kPrefetchAhead = 2 * kBlock;  // score prefetch distance (positions)

// One (layer, KV head) row of window_scores; see ScoreSpec for the arithmetic and its order.
// Writes the row to acc[0..n); with `st`, also its entropy sums (for LAVa) while it is hot.
// Works in blocks of kBlock positions: for each query head of the group, every block is
// checked (w == 0 input), pooled and folded into acc; the last head's pass also applies the
// group mean, the scale and the finiteness check. Per element the operations and their order
// are those of ScoreSpec, independent of the blocking.
template <int kIsa>
LAMINA_KV_INLINE void score_row(const float* in, const ScoreSpec& sp, const RowScale& scale,
                                float* acc, RowBuffers& B, std::size_t r, RowEntropySums* st,
                                float* nu_out) {
  const std::size_t H = sp.heads, Hkv = sp.kv_heads, G = H / Hkv;
  const std::size_t S = sp.seq_len, w = sp.window, n = sp.n_candidates;
  const std::size_t l = r / Hkv, g = r % Hkv;
  const bool pooled = sp.pool != Pool::None && sp.kernel > 1;
  const bool is_max = sp.pool == Pool::Max;
  const std::size_t rad = pooled ? sp.kernel / 2 : 0;

  bool scaled = false;
  float nu = 1.0f;
  if (scale.per_row || scale.per_token) {
    scaled = true;
    if (scale.per_row) {
      nu = scale.per_row[r];
    } else {
      // one pass: finiteness, the minimum over the row, nu = the maximum over the candidates
      const float* v = scale.per_token + r * S;
      uint32_t bad = 0, lo = 0xffffffffu, hi = 0u;
      for (std::size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, v + i, sizeof u);
        bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
        const uint32_t k = order_key(v[i]);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
      }
      for (std::size_t i = n; i < S; ++i) {
        uint32_t u;
        std::memcpy(&u, v + i, sizeof u);
        bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
        const uint32_t k = order_key(v[i]);
        lo = k < lo ? k : lo;
      }
      LAMINA_CHECK(bad == 0, "value_norms[", l, ", ", g, "] contains NaN or Inf");
      const float vmin = from_order_key(lo);  // S >= 1 entries
      nu = n > 0 ? from_order_key(hi) : 0.0f;
      LAMINA_CHECK(vmin >= 0.0f, "value_norms must be >= 0 (they are L1 norms); row [", l,
                   ", ", g, "] has ", vmin);
    }
    LAMINA_CHECK(std::isfinite(nu) && nu >= 0.0f, "value norm scale of row [", l, ", ", g,
                 "] must be finite and >= 0, got ", nu);
  }
  if (nu_out) *nu_out = nu;
  // Software prefetch, spread over this row's blocks: the next row's value norms (read by its
  // first pass before any compute would hide their latency) and, for [L,H,S] input, the
  // scores kPrefetchAhead positions ahead (the next row's follow this row's in memory). The
  // hardware prefetchers stop at page boundaries and ramp up again on every new stream.
  const float* pf_norm = nullptr;
  std::size_t pf_norm_left = 0;
  if (scale.per_token && r + 1 < sp.layers * Hkv) {
    pf_norm = scale.per_token + (r + 1) * S;
    pf_norm_left = S;
  }
  const float* const in_end = in + sp.layers * H * (w > 0 ? w : 1) * S;
  const bool mean = G > 1 && sp.group_reduce == Reduce::Mean;
  const float gf = static_cast<float>(G);

  static_assert(kBlock == kEntropyBlock, "entropy sums are taken per score block");
  double ez = 0.0, es = 0.0;
  uint32_t emin = 0xffffffffu;
  alignas(64) float tmp[kBlock];
  for (std::size_t q = 0; q < G; ++q) {
    const std::size_t h = g * G + q;
    const float* a;
    if (w == 0) {
      a = in + (l * H + h) * S;
      LAMINA_CHECK(all_finite(a + n, S - n), "scores[", l, ", ", h,
                   "] contains NaN or Inf; pass finite scores");
    } else {
      if (B.reduced.size() < n) B.reduced.resize(n);
      const float* base = in + ((l * H + h) * w) * S;
      float* red = B.reduced.data();
      for (std::size_t j0 = 0; j0 < n; j0 += kChunk) {
        const std::size_t j1 = std::min(n, j0 + kChunk);
        std::memcpy(red + j0, base + j0, (j1 - j0) * sizeof(float));
        for (std::size_t t = 1; t < w; ++t) {
          const float* row = base + t * S;
          for (std::size_t j = j0; j < j1; ++j) red[j] += row[j];
        }
      }
      bool ok = all_finite(red, n);
      for (std::size_t t = 0; t < w && ok; ++t) ok = all_finite(base + t * S + n, S - n);
      LAMINA_CHECK(ok, "window attention [", l, ", ", h,
                   "] contains NaN or Inf (or its window sum overflows float32); pass "
                   "finite attention weights");
      if (sp.window_reduce == Reduce::Mean) {
        div_by<kIsa>(red, n, static_cast<float>(w));
      } else if (sp.causal_normalize) {
        for (std::size_t j = 0; j < n; ++j)
          red[j] /= static_cast<float>(std::min(w, S - j));
      }
      a = red;
    }
    const bool last = q + 1 == G;
    for (std::size_t j0 = 0; j0 < n; j0 += kBlock) {
      const std::size_t j1 = std::min(n, j0 + kBlock), len = j1 - j0;
      if (w == 0) {
        const float* ahead = a + j1 + kPrefetchAhead;
        prefetch_lines<3>(ahead, ahead < in_end ? std::min(len, std::size_t(in_end - ahead)) : 0);
      }
      if (pf_norm_left) {
        const std::size_t m = std::min(pf_norm_left, kBlock);
        prefetch_lines<1>(pf_norm, m);  // used from L2 by the next row
        pf_norm += m;
        pf_norm_left -= m;
      }
      if (w == 0) {  // the inputs this block's pooling reads, before they are used
        const std::size_t c0 = j0 >= rad ? j0 - rad : 0, c1 = std::min(n, j1 + rad);
        LAMINA_CHECK(all_finite(a + c0, c1 - c0), "scores[", l, ", ", h,
                     "] contains NaN or Inf; pass finite scores");
      }
      float* dst = acc + j0;
      const float* p;
      if (q == 0) {
        if (pooled) {
          pool_block<kIsa>(a, n, sp.kernel, is_max, j0, j1, dst);
        } else {
          std::memcpy(dst, a + j0, len * sizeof(float));
        }
      } else {
        if (pooled) {
          pool_block<kIsa>(a, n, sp.kernel, is_max, j0, j1, tmp);
          p = tmp;
        } else {
          p = a + j0;
        }
        if (sp.group_reduce == Reduce::Max) {
          for (std::size_t j = 0; j < len; ++j) dst[j] = p[j] > dst[j] ? p[j] : dst[j];
        } else {
          for (std::size_t j = 0; j < len; ++j) dst[j] += p[j];
        }
      }
      if (last) {
        if (mean) div_by<kIsa>(dst, len, gf);
        if (scaled)
          for (std::size_t j = 0; j < len; ++j) dst[j] *= nu;
        LAMINA_CHECK(all_finite(dst, len), "scores of row [", l, ", ", g,
                     "] overflow float32 after scaling; rescale the inputs");
        if (st) entropy_block(dst, len, &ez, &es, &emin);  // while the block is in L1
      }
    }
  }
  if (st) {  // entropy_sums(acc, n, ...), block by block above
    st->sum = ez;
    st->sum_slogs = es;
    st->min = n ? from_order_key(emin) : 0.0f;
  }
}

using ScoreRowFn = void (*)(const float*, const ScoreSpec&, const RowScale&, float*, RowBuffers&,
                            std::size_t, RowEntropySums*, float*);

void score_row_base(const float* in, const ScoreSpec& sp, const RowScale& sc, float* acc,
                    RowBuffers& B, std::size_t r, RowEntropySums* st, float* nu) {
  score_row<0>(in, sp, sc, acc, B, r, st, nu);
}
#if defined(LAMINA_ISA_TARGETS)
__attribute__((target("avx2"))) void score_row_avx2(const float* in, const ScoreSpec& sp,
                                                    const RowScale& sc, float* acc,
                                                    RowBuffers& B, std::size_t r,
                                                    RowEntropySums* st, float* nu) {
  score_row<1>(in, sp, sc, acc, B, r, st, nu);
}
__attribute__((target("avx512f,avx2"))) void score_row_avx512(const float* in,
                                                              const ScoreSpec& sp,
                                                              const RowScale& sc, float* acc,
                                                              RowBuffers& B, std::size_t r,
                                                              RowEntropySums* st, float* nu) {
  score_row<2>(in, sp, sc, acc, B, r, st, nu);
}
#endif

using EntropyFn = void (*)(const float*, std::size_t, double*, double*, float*);
void entropy_base(const float* s, std::size_t N, double* z, double* sl, float* mn) {
  entropy_sums(s, N, z, sl, mn);
}
#if defined(LAMINA_ISA_TARGETS)
__attribute__((target("avx2"))) void entropy_avx2(const float* s, std::size_t N, double* z,
                                                  double* sl, float* mn) {
  entropy_sums(s, N, z, sl, mn);
}
__attribute__((target("avx512f,avx2"))) void entropy_avx512(const float* s, std::size_t N,
                                                            double* z, double* sl, float* mn) {
  entropy_sums(s, N, z, sl, mn);
}
#endif

// The scoring loops' family: one (score_row, entropy) pair per ISA.
struct ScoreLoops {
  ScoreRowFn score_row;
  EntropyFn entropy;
};
const ScoreLoops kBase{score_row_base, entropy_base};
const ScoreLoops& base_loops() { return kBase; }
#if defined(LAMINA_ISA_TARGETS)
const ScoreLoops kAvx2{score_row_avx2, entropy_avx2};
const ScoreLoops kAvx512{score_row_avx512, entropy_avx512};
const ScoreLoops& avx2_loops() { return kAvx2; }
const ScoreLoops& avx512_loops() { return kAvx512; }
#endif
constexpr isa::Family<ScoreLoops> kScoreLoops{&base_loops, LAMINA_ISA_TARGET_X86(&avx2_loops),
                                              LAMINA_ISA_TARGET_X86(&avx512_loops)};

ScoreRowFn score_row_fn() { return kScoreLoops.get(detail::selector()).score_row; }
EntropyFn entropy_fn() { return kScoreLoops.get(detail::selector()).entropy; }

}  // namespace

void check_score_spec(const ScoreSpec& sp, bool per_row_scale, bool per_token_scale) {
  LAMINA_CHECK(sp.layers >= 1 && sp.heads >= 1 && sp.kv_heads >= 1 && sp.seq_len >= 1,
               "window_scores: empty shape");
  LAMINA_CHECK(sp.heads % sp.kv_heads == 0, "window_scores: heads (", sp.heads,
               ") must be a multiple of kv_heads (", sp.kv_heads, ")");
  LAMINA_CHECK(sp.window <= sp.seq_len, "window_scores: window (", sp.window,
               ") exceeds seq_len (", sp.seq_len, ")");
  LAMINA_CHECK(sp.n_candidates <= sp.seq_len, "window_scores: n_candidates exceeds seq_len");
  LAMINA_CHECK(sp.kernel >= 1 && sp.kernel % 2 == 1, "window_scores: kernel must be odd, got ",
               sp.kernel);
  LAMINA_CHECK(sp.window_reduce == Reduce::Mean || sp.window_reduce == Reduce::Sum,
               "window_scores: window_reduce must be Mean or Sum");
  LAMINA_CHECK(sp.group_reduce == Reduce::Mean || sp.group_reduce == Reduce::Max,
               "window_scores: group_reduce must be Mean or Max");
  LAMINA_CHECK(!sp.causal_normalize || sp.window_reduce == Reduce::Sum,
               "window_scores: causal_normalize needs window_reduce Sum");
  LAMINA_CHECK(!(per_row_scale && per_token_scale), "window_scores: give one kind of scale");
}

namespace {
void check_spec(const ScoreSpec& sp, const RowScale& scale) {
  check_score_spec(sp, scale.per_row != nullptr, scale.per_token != nullptr);
}

int score_threads(const ScoreSpec& sp, int threads) {
  const std::size_t G = sp.heads / sp.kv_heads;
  const std::size_t per_row_work = G * (sp.window > 0 ? sp.window : 1) * sp.seq_len;
  return threads_for(sp.layers * sp.kv_heads * per_row_work, kMinPerThread, threads);
}
}  // namespace

void window_scores(const float* in, const ScoreSpec& sp, const RowScale& scale, float* out,
                   int threads, RowEntropySums* sums) {
  check_spec(sp, scale);
  const std::size_t rows = sp.layers * sp.kv_heads, n = sp.n_candidates;
  const int nt = score_threads(sp, threads);
  std::vector<RowBuffers> bufs(nt > 0 ? nt : 1);
  const ScoreRowFn fn = score_row_fn();
  parallel_for(rows, nt, [&](std::size_t r, int worker) {
    fn(in, sp, scale, out + r * n, bufs[worker], r, sums ? sums + r : nullptr, nullptr);
  });
}

void score_select_rows(const float* in, const ScoreSpec& sp, const RowScale& scale,
                       const int64_t* k, std::size_t tail, const int64_t* offsets, int64_t* out,
                       int threads) {
  check_spec(sp, scale);
  const std::size_t rows = sp.layers * sp.kv_heads, n = sp.n_candidates;
  detail::check_select_args(rows, n, k, tail, offsets);
  const int nt = score_threads(sp, threads);
  struct Worker {
    RowBuffers bufs;
    std::vector<float> row;
    detail::SelectScratchPtr scratch = detail::make_select_scratch();
  };
  std::vector<Worker> ws(nt > 0 ? nt : 1);
  const ScoreRowFn fn = score_row_fn();
  parallel_for(rows, nt, [&](std::size_t r, int worker) {
    Worker& W = ws[worker];
    if (W.row.size() < n) W.row.resize(n);
    fn(in, sp, scale, W.row.data(), W.bufs, r, nullptr, nullptr);
    detail::select_row(W.row.data(), n, static_cast<std::size_t>(k[r]), tail, out + offsets[r],
                       *W.scratch);
  });
}

void lava_select(const float* in, const ScoreSpec& sp, const RowScale& scale,
                 std::size_t per_head, double alpha, std::size_t tail, double* entropy,
                 int64_t* layer_budget, int64_t* counts, int64_t* head_budgets,
                 int64_t* offsets, int64_t* out, int threads) {
  check_spec(sp, scale);
  const std::size_t L = sp.layers, Hkv = sp.kv_heads, rows = L * Hkv, n = sp.n_candidates;
  LAMINA_CHECK(per_head <= n, "lava_select: per_head (", per_head, ") exceeds n (", n, ")");
  LAMINA_CHECK(alpha >= 0.0 && alpha <= 1.0, "lava_select: alpha must be in [0, 1], got ", alpha);
  const int nt = score_threads(sp, threads);
  const ScoreRowFn fn = score_row_fn();
  struct Worker {
    RowBuffers bufs;
    std::vector<float> buf;  // one row (pass 1) or one layer (pass 2)
    detail::LavaScratchPtr lava = detail::make_lava_scratch();
    std::size_t bytes() const {
      return (bufs.reduced.capacity() + buf.capacity()) * sizeof(float) +
             detail::scratch_bytes(*lava);
    }
  };
  // The calling thread's scratch stays with it between calls while it is at most 16 MiB
  // (fresh pages for it cost more than the selection passes it serves); other workers run
  // on threads of their own and get fresh scratch.
  static thread_local Worker kept_worker;
  std::vector<Worker> extra(nt > 1 ? nt - 1 : 0);
  struct Release {  // on every exit
    Worker& w;
    ~Release() {
      if (w.bytes() > (std::size_t{16} << 20)) w = Worker();
    }
  } release{kept_worker};
  auto worker_of = [&](int i) -> Worker& { return i == 0 ? kept_worker : extra[i - 1]; };
  // pass 1: entropy sums, the value-norm scale and the best ~1.25 * per_head entries of every
  // row (a few percent of it); the rest of the scores is dropped
  std::vector<RowEntropySums> sums(rows);
  std::vector<float> nu(rows, 1.0f);
  std::vector<detail::RowCandidates> cands(rows);
  // the candidates' storage stays with the calling thread between calls when it is small
  // (rows * cap * 8 bytes <= 16 MiB; ~5 MiB at L = 32, H_kv = 8, per_head = 1k): fresh pages
  // would cost more than the pass they save. Larger requests use storage freed on return.
  const std::size_t want = per_head + per_head / 4 + 64, cap = 2 * want;
  const std::size_t at_least = per_head + per_head / 8 + 32;  // re-collect rows short of this
  static thread_local std::vector<float> kept_vals;
  static thread_local std::vector<int32_t> kept_pos;
  std::vector<float> own_vals;
  std::vector<int32_t> own_pos;
  const bool keep = rows * cap * (sizeof(float) + sizeof(int32_t)) <= (std::size_t{16} << 20);
  std::vector<float>& cand_vals = keep ? kept_vals : own_vals;
  std::vector<int32_t>& cand_pos = keep ? kept_pos : own_pos;
  if (cand_vals.size() < rows * cap) {
    cand_vals.resize(rows * cap);
    cand_pos.resize(rows * cap);
  }
  float* const cvals = cand_vals.data();  // the caller's storage: workers use these pointers
  int32_t* const cpos = cand_pos.data();
  const bool scaled = scale.per_row || scale.per_token;
  parallel_for(rows, nt, [&](std::size_t r, int worker) {
    Worker& W = worker_of(worker);
    if (W.buf.size() < n) W.buf.resize(n);
    fn(in, sp, scale, W.buf.data(), W.bufs, r, &sums[r], scaled ? &nu[r] : nullptr);
    // the next row's scores ([L,H,S] input: they follow this row's) stream in meanwhile
    const std::size_t G = sp.heads / Hkv;
    const bool pf = sp.window == 0 && r + 1 < rows;
    detail::row_candidates(W.buf.data(), n, want, at_least, cap, cvals + r * cap, cpos + r * cap,
                           cands[r], *W.lava, pf ? in + (r + 1) * G * sp.seq_len : nullptr,
                           pf ? sp.seq_len : 0);
  });
  entropy_from_sums(sums.data(), L, Hkv, n, entropy);
  apportion(entropy, L, static_cast<int64_t>(L * per_head), static_cast<int64_t>(n),
            layer_budget);
  // pass 2, per layer: counts, head budgets and row selections from the candidates; rows (or
  // layers) whose candidates do not suffice are scored again (same arithmetic, the scale now
  // per row) and selected from their scores
  RowScale per_row;
  if (scaled) per_row.per_row = nu.data();
  std::vector<int64_t> start(L + 1, 0);  // where layer l's kept positions go in out
  for (std::size_t l = 0; l < L; ++l)
    start[l + 1] = start[l] + static_cast<int64_t>(Hkv) *
                                  (layer_budget[l] + static_cast<int64_t>(tail));
  const int nl = nt < 1 ? 1 : std::min<int>(nt, static_cast<int>(L));
  parallel_for(L, nl, [&](std::size_t l, int worker) {
    Worker& W = worker_of(worker);
    const std::size_t b = static_cast<std::size_t>(layer_budget[l]);
    auto row = [&](std::size_t g) {  // only the rows (or layers) scored again need W.buf
      if (W.buf.size() < Hkv * n) W.buf.resize(Hkv * n);
      float* dst = W.buf.data() + g * n;
      fn(in, sp, per_row, dst, W.bufs, l * Hkv + g, nullptr, nullptr);
      return static_cast<const float*>(dst);
    };
    if (detail::lava_layer_candidates(cands.data() + l * Hkv, Hkv, n, b, alpha, tail,
                                      counts + l * Hkv, head_budgets + l * Hkv,
                                      out + start[l], *W.lava, row)) {
      return;
    }
    for (std::size_t g = 0; g < Hkv; ++g) row(g);
    detail::lava_layer(W.buf.data(), Hkv, n, b, alpha, tail, counts + l * Hkv,
                       head_budgets + l * Hkv, out + start[l], *W.lava);
  });
  detail::lava_offsets(rows, tail, head_budgets, offsets);
}

void entropy_from_sums(const RowEntropySums* sums, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, double* out) {
  const std::size_t N = kv_heads * n;
  for (std::size_t l = 0; l < layers; ++l) {
    double z = 0.0, sl = 0.0;
    float mn = 0.0f;
    for (std::size_t g = 0; g < kv_heads; ++g) {
      const RowEntropySums& s = sums[l * kv_heads + g];
      z += s.sum;
      sl += s.sum_slogs;
      mn = g == 0 ? s.min : std::min(mn, s.min);
    }
    LAMINA_CHECK(!(mn < 0.0f), "entropy: scores of layer ", l,
                 " contain negative values; entropy needs scores >= 0");
    if (N <= 1 || !(z > 0.0)) {
      out[l] = 0.0;
      continue;
    }
    const double h = std::log(z) - sl / z;
    out[l] = std::min(1.0, std::max(0.0, h / std::log(static_cast<double>(N))));
  }
}

void layer_entropy(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                   double* out, int threads) {
  const std::size_t N = kv_heads * n;
  const EntropyFn fn = entropy_fn();
  std::vector<RowEntropySums> sums(layers * kv_heads);
  const int nt = threads_for(layers * (N + 1), kMinPerThread, threads);
  parallel_for(layers * kv_heads, nt, [&](std::size_t r, int) {
    RowEntropySums& st = sums[r];
    if (n > 0) fn(scores + r * n, n, &st.sum, &st.sum_slogs, &st.min);
  });
  entropy_from_sums(sums.data(), layers, kv_heads, n, out);
}

void l1_norms(const float* values, std::size_t rows, std::size_t dim, float* out, int threads) {
  constexpr std::size_t kBlock = 1024;
  const std::size_t blocks = (rows + kBlock - 1) / kBlock;
  const int nt = threads_for(rows * dim, kMinPerThread * 4, threads);
  parallel_for(blocks, nt, [&](std::size_t b, int) {
    const std::size_t r0 = b * kBlock, r1 = std::min(rows, r0 + kBlock);
    for (std::size_t r = r0; r < r1; ++r) {
      const float* v = values + r * dim;
      float s = 0.0f;
      for (std::size_t d = 0; d < dim; ++d) s += std::fabs(v[d]);
      LAMINA_CHECK(std::isfinite(s), "values contain NaN or Inf (row ", r, ")");
      out[r] = s;
    }
  });
}

void gather_rows(const void* src, std::size_t n_rows, std::size_t seq_len, std::size_t row_bytes,
                 const int64_t* offsets, const int64_t* idx, std::size_t padded_len, void* dst,
                 int threads) {
  for (std::size_t r = 0; r < n_rows; ++r) {
    LAMINA_CHECK(offsets[r + 1] >= offsets[r], "gather_rows: offsets must be non-decreasing");
    LAMINA_CHECK(padded_len == 0 || static_cast<std::size_t>(offsets[r + 1] - offsets[r]) <= padded_len,
                 "gather_rows: a row is longer than padded_len");
  }
  const std::size_t total = static_cast<std::size_t>(offsets[n_rows]);
  const int nt = threads_for(total * row_bytes / 4 + n_rows, kMinPerThread, threads);
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  parallel_for(n_rows, nt, [&](std::size_t r, int) {
    const int64_t b = offsets[r], e = offsets[r + 1];
    const unsigned char* base = s + r * seq_len * row_bytes;
    unsigned char* o = padded_len ? d + r * padded_len * row_bytes : d + b * row_bytes;
    for (int64_t i = b; i < e; ++i) {
      const int64_t p = idx[i];
      LAMINA_CHECK_INDEX(p >= 0 && static_cast<std::size_t>(p) < seq_len, "kept position ", p,
                         " of row ", r, " is outside [0, ", seq_len, ")");
      std::memcpy(o, base + p * row_bytes, row_bytes);
      o += row_bytes;
    }
    if (padded_len) {
      const std::size_t len = static_cast<std::size_t>(e - b);
      std::memset(o, 0, (padded_len - len) * row_bytes);
    }
  });
}

}  // namespace lamina::kv
