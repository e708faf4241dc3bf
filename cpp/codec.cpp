// Row codes and the compressed candidate scan (see lamina/codec.hpp).
#include "lamina/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "lamina/common.hpp"
#include "lamina/enum_names.hpp"
#include "lamina/isa.hpp"
#include "topk_internal.hpp"

#if defined(LAMINA_ISA_TARGETS)
#include <immintrin.h>
#endif

namespace lamina {

namespace {

constexpr int kPlanes = 4;  // bits per query dimension in the binary scan

std::size_t words_of(std::size_t dim) { return (dim + 63) / 64; }
std::size_t int8_len(std::size_t dim) { return (dim + 63) / 64 * 64; }

// One kernel table per ISA. Both kernels score `n` rows given by pointer:
//  binary: out[r] = sum_{p < 4} 2^p popcount(planes[p * W + w] & row_r[w]), w < W words;
//  int8:   out[r] = sum_{j < L} q[j] * row_r[j] (L a multiple of 64, |q[j]|, |row[j]| <= 127);
//          qu[j] = q[j] + 128 and counts[r] = sum_j row_r[j] serve the unsigned-by-signed
//          (VNNI) form: sum qu * c = sum q * c + 128 * count.
struct CodecKernels {
  const char* isa;
  void (*binary)(const uint64_t* planes, std::size_t W, const uint8_t* const* rows,
                 std::size_t n, int32_t* out);
  void (*int8)(const int8_t* q, const uint8_t* qu, std::size_t L, const uint8_t* const* rows,
               const int32_t* counts, std::size_t n, int32_t* out);
};

// ------------------------------------------------------------------------------- scalar
void binary_scalar(const uint64_t* planes, std::size_t W, const uint8_t* const* rows,
                   std::size_t n, int32_t* out) {
  for (std::size_t r = 0; r < n; ++r) {
    const uint64_t* x = reinterpret_cast<const uint64_t*>(rows[r]);
    int32_t s = 0;
    for (std::size_t w = 0; w < W; ++w)
      for (int p = 0; p < kPlanes; ++p) s += __builtin_popcountll(planes[p * W + w] & x[w]) << p;
    out[r] = s;
  }
}

void int8_scalar(const int8_t* q, const uint8_t*, std::size_t L, const uint8_t* const* rows,
                 const int32_t*, std::size_t n, int32_t* out) {
  for (std::size_t r = 0; r < n; ++r) {
    const int8_t* x = reinterpret_cast<const int8_t*>(rows[r]);
    int32_t s = 0;
    for (std::size_t j = 0; j < L; ++j) s += int32_t(q[j]) * int32_t(x[j]);
    out[r] = s;
  }
}

const CodecKernels kScalar{"scalar", binary_scalar, int8_scalar};

#if defined(LAMINA_ISA_TARGETS)
// ------------------------------------------------------------------------------- AVX2
#define LAMINA_AVX2 __attribute__((target("avx2,popcnt")))

LAMINA_AVX2 void binary_avx2(const uint64_t* planes, std::size_t W, const uint8_t* const* rows,
                             std::size_t n, int32_t* out) {
  for (std::size_t r = 0; r < n; ++r) {
    const uint64_t* x = reinterpret_cast<const uint64_t*>(rows[r]);
    int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t w = 0; w < W; ++w) {
      const uint64_t v = x[w];
      s0 += _mm_popcnt_u64(planes[w] & v);
      s1 += _mm_popcnt_u64(planes[W + w] & v);
      s2 += _mm_popcnt_u64(planes[2 * W + w] & v);
      s3 += _mm_popcnt_u64(planes[3 * W + w] & v);
    }
    out[r] = static_cast<int32_t>(s0 + 2 * s1 + 4 * s2 + 8 * s3);
  }
}

LAMINA_AVX2 inline int32_t hsum_epi32_avx2(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// sum q * x per 32 bytes: |q| (unsigned) times x with q's sign, pairwise into 16 bits (at most
// 2 * 127 * 127, no saturation), then into 32 bits.
LAMINA_AVX2 inline __m256i dot32_avx2(__m256i qabs, __m256i q, const uint8_t* x, __m256i ones) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(qabs, _mm256_sign_epi8(xv, q)), ones);
}

LAMINA_AVX2 void int8_avx2(const int8_t* q, const uint8_t*, std::size_t L,
                           const uint8_t* const* rows, const int32_t*, std::size_t n,
                           int32_t* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  std::size_t r = 0;
  for (; r + 4 <= n; r += 4) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t j = 0; j < L; j += 32) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j));
      const __m256i qa = _mm256_sign_epi8(qv, qv);
      a0 = _mm256_add_epi32(a0, dot32_avx2(qa, qv, rows[r] + j, ones));
      a1 = _mm256_add_epi32(a1, dot32_avx2(qa, qv, rows[r + 1] + j, ones));
      a2 = _mm256_add_epi32(a2, dot32_avx2(qa, qv, rows[r + 2] + j, ones));
      a3 = _mm256_add_epi32(a3, dot32_avx2(qa, qv, rows[r + 3] + j, ones));
    }
    out[r] = hsum_epi32_avx2(a0);
    out[r + 1] = hsum_epi32_avx2(a1);
    out[r + 2] = hsum_epi32_avx2(a2);
    out[r + 3] = hsum_epi32_avx2(a3);
  }
  for (; r < n; ++r) {
    __m256i a0 = _mm256_setzero_si256();
    for (std::size_t j = 0; j < L; j += 32) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j));
      a0 = _mm256_add_epi32(a0, dot32_avx2(_mm256_sign_epi8(qv, qv), qv, rows[r] + j, ones));
    }
    out[r] = hsum_epi32_avx2(a0);
  }
}
#undef LAMINA_AVX2

const CodecKernels kAvx2{"avx2", binary_avx2, int8_avx2};

// ------------------------------------------------------------------------------- AVX-512
#define LAMINA_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx512vnni,avx2,popcnt")))

LAMINA_AVX512 void binary_avx512(const uint64_t* planes, std::size_t W,
                                 const uint8_t* const* rows, std::size_t n, int32_t* out) {
  for (std::size_t r = 0; r < n; ++r) {
    const uint64_t* x = reinterpret_cast<const uint64_t*>(rows[r]);
    __m512i acc = _mm512_setzero_si512();
    for (std::size_t w = 0; w < W; w += 8) {
      const __mmask8 m = W - w >= 8 ? __mmask8(0xff) : __mmask8((1u << (W - w)) - 1);
      const __m512i v = _mm512_maskz_loadu_epi64(m, x + w);
      for (int p = 0; p < kPlanes; ++p) {
        const __m512i pl = _mm512_maskz_loadu_epi64(m, planes + p * W + w);
        acc = _mm512_add_epi64(
            acc, _mm512_slli_epi64(_mm512_popcnt_epi64(_mm512_and_si512(pl, v)), p));
      }
    }
    out[r] = static_cast<int32_t>(_mm512_reduce_add_epi64(acc));
  }
}

// The four horizontal sums of a..d, in one __m128i: per 128-bit lane [a, b, c, d] partial sums
// (unpack and add twice), then the four lanes added.
LAMINA_AVX512 inline __m128i reduce4_epi32_avx512(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i abcd =
      _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(abcd),
                                     _mm512_extracti64x4_epi64(abcd, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

LAMINA_AVX512 void int8_avx512(const int8_t*, const uint8_t* qu, std::size_t L,
                               const uint8_t* const* rows, const int32_t* counts, std::size_t n,
                               int32_t* out) {
  std::size_t r = 0;
  // eight rows at a time: eight independent load + multiply-add chains in flight
  for (; r + 8 <= n; r += 8) {
    __m512i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm512_setzero_si512();
    for (std::size_t j = 0; j < L; j += 64) {
      const __m512i qv = _mm512_loadu_si512(qu + j);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) a[i] = _mm512_dpbusd_epi32(a[i], qv, _mm512_loadu_si512(rows[r + i] + j));
    }
    const __m128i c0 = _mm_slli_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(counts + r)), 7);
    const __m128i c1 = _mm_slli_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(counts + r + 4)), 7);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r),
                     _mm_sub_epi32(reduce4_epi32_avx512(a[0], a[1], a[2], a[3]), c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r + 4),
                     _mm_sub_epi32(reduce4_epi32_avx512(a[4], a[5], a[6], a[7]), c1));
  }
  for (; r < n; ++r) {
    __m512i a0 = _mm512_setzero_si512();
    for (std::size_t j = 0; j < L; j += 64)
      a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(qu + j), _mm512_loadu_si512(rows[r] + j));
    out[r] = _mm512_reduce_add_epi32(a0) - 128 * counts[r];
  }
}
#undef LAMINA_AVX512

const CodecKernels kAvx512{"avx512", binary_avx512, int8_avx512};

const CodecKernels& avx2_table() { return kAvx2; }
// The AVX-512 table needs VPOPCNTDQ, BW, VL and VNNI beside AVX-512F; without them the AVX2
// table serves (the family's choice stays "avx512": the other kernels' path).
const CodecKernels& avx512_table() {
  static const bool full = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return full ? kAvx512 : kAvx2;
}
#endif

const CodecKernels& scalar_table() { return kScalar; }
constexpr isa::Family<CodecKernels> kCodecs{&scalar_table, LAMINA_ISA_TARGET_X86(&avx2_table),
                                            LAMINA_ISA_TARGET_X86(&avx512_table)};
isa::Selector g_codec_isa;

const CodecKernels& kernels() { return kCodecs.get(g_codec_isa); }

// Round to nearest, ties to even (numpy's rint) for |v| < 2^22, in a form that vectorises.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return v >= 0.f ? (v + kMagic) - kMagic : -((-v + kMagic) - kMagic);
}

// The int8 code of one vector (rows and queries alike): c_j = rint(x_j / s), s = max |x_j| / 127
// (0 for a zero vector). Writes out[0 .. d); returns s.
float quantize_int8(const float* x, std::size_t d, int8_t* out) {
  float mx = 0.f;
  for (std::size_t j = 0; j < d; ++j) mx = std::max(mx, std::fabs(x[j]));
  const float s = mx / 127.0f;
  const float inv = s > 0.f ? 1.0f / s : 0.f;
  for (std::size_t j = 0; j < d; ++j)
    out[j] = static_cast<int8_t>(std::clamp(round_even(x[j] * inv), -127.0f, 127.0f));
  return s;
}

}  // namespace

QueryCodes encode_queries(Codec c, const float* Q, std::size_t nq, std::size_t d, Metric metric) {
  QueryCodes qc;
  qc.qsq.resize(nq);
  qc.qinv.resize(nq);
  for (std::size_t q = 0; q < nq; ++q) {
    double s = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      const float v = Q[q * d + j];
      LAMINA_CHECK(std::isfinite(v), "queries contain NaN or Inf; pass finite queries");
      s += double(v) * v;
    }
    LAMINA_CHECK(metric != Metric::Cosine || s > 0.0, "query ", q,
                 " has zero norm; cosine similarity is undefined");
    qc.qsq[q] = static_cast<float>(s);
    qc.qinv[q] = s > 0.0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.f;
  }
  std::vector<float> u(d);
  if (c == Codec::Binary) {
    const std::size_t W = qc.W = words_of(d);
    qc.planes.assign(nq * kPlanes * W, 0);
    qc.lo.resize(nq);
    qc.delta.resize(nq);
    qc.usum.resize(nq);
    for (std::size_t q = 0; q < nq; ++q) {
      const float* x = Q + q * d;
      const auto [mn, mx] = std::minmax_element(x, x + d);
      const float lo = *mn, delta = (*mx - *mn) / 15.0f;
      const float inv = delta > 0.f ? 1.0f / delta : 0.f;
      float usum = 0.f;
      for (std::size_t j = 0; j < d; ++j) {
        u[j] = std::min(round_even((x[j] - lo) * inv), 15.0f);
        usum += u[j];
      }
      uint64_t* pl = qc.planes.data() + q * kPlanes * W;
      for (std::size_t j = 0; j < d; ++j) {
        const unsigned v = static_cast<unsigned>(u[j]);
        const uint64_t bit = uint64_t(1) << (j % 64);
        for (int p = 0; p < kPlanes; ++p)
          if ((v >> p) & 1u) pl[p * W + j / 64] |= bit;
      }
      qc.lo[q] = lo;
      qc.delta[q] = delta;
      qc.usum[q] = usum;
    }
  } else {
    const std::size_t L = qc.L = int8_len(d);
    qc.q8.assign(nq * L, 0);
    qc.qu.assign(nq * L, 128);
    qc.scale.resize(nq);
    for (std::size_t q = 0; q < nq; ++q) {
      int8_t* c8 = qc.q8.data() + q * L;
      qc.scale[q] = quantize_int8(Q + q * d, d, c8);
      for (std::size_t j = 0; j < d; ++j) qc.qu[q * L + j] = static_cast<uint8_t>(c8[j] + 128);
    }
  }
  return qc;
}

namespace {

// Scores blocks of rows from their codes for select_rows (topk_internal.hpp).
struct CodeScorer {
  const CodeStore* cs;
  const CodecKernels* K;
  Metric metric;
  std::size_t d;
  QueryCodes qc;

  struct Scratch {
    std::vector<const uint8_t*> ptrs = std::vector<const uint8_t*>(detail::kBlockRows);
    std::vector<int32_t> counts = std::vector<int32_t>(detail::kBlockRows);
    std::vector<int32_t> dots = std::vector<int32_t>(detail::kBlockRows);
    std::vector<float> rn = std::vector<float>(detail::kBlockRows);
    bool failed = false;
  };
  Scratch scratch() const { return Scratch{}; }

  void operator()(Scratch& sc, const uint32_t* ids, std::size_t cnt, std::size_t q0,
                  std::size_t q1, detail::Heap* heaps) const {
    for (std::size_t i = 0; i < cnt; ++i) {
      const uint8_t* p = cs->base + std::size_t(ids[i]) * cs->stride;
      sc.ptrs[i] = p;
      sc.counts[i] = cs->count[ids[i]];
      // all of the block's code lines requested up front: a short scan (one agent's rows)
      // is otherwise bound by the latency of one miss after another, not by bandwidth
      for (std::size_t off = 0; off < cs->stride; off += 64) __builtin_prefetch(p + off);
      __builtin_prefetch(p + cs->stride - 1);
    }
    if (metric == Metric::Cosine)
      for (std::size_t i = 0; i < cnt; ++i) {
        const float n2 = cs->sqnorms[ids[i]];
        sc.rn[i] = n2 > 0.f ? 1.0f / std::sqrt(n2) : 0.f;
      }
    for (std::size_t q = q0; q < q1; ++q) {
      // <q, x> ~ factor_r * (a * count_r + b * dot_r - qsum), per codec:
      //  binary: a = 2 lo, b = 2 delta, qsum = sum_j (lo + delta u_j);  int8: a = 0, b = scale_q
      float a, b;
      if (cs->codec == Codec::Binary) {
        K->binary(qc.planes.data() + q * kPlanes * qc.W, qc.W, sc.ptrs.data(), cnt,
                  sc.dots.data());
        a = 2.0f * qc.lo[q];
        b = 2.0f * qc.delta[q];
      } else {
        K->int8(qc.q8.data() + q * qc.L, qc.qu.data() + q * qc.L, qc.L, sc.ptrs.data(),
                sc.counts.data(), cnt, sc.dots.data());
        a = 0.f;
        b = qc.scale[q];
      }
      const float qsum =
          cs->codec == Codec::Binary ? float(d) * qc.lo[q] + qc.delta[q] * qc.usum[q] : 0.f;
      detail::Heap& h = heaps[q - q0];
      float thr = h.threshold();
      for (std::size_t i = 0; i < cnt; ++i) {
        const float f = cs->factor[ids[i]];
        float s = f * (a * float(sc.counts[i]) + b * float(sc.dots[i]) - qsum);
        if (metric == Metric::Cosine)
          s *= qc.qinv[q] * sc.rn[i];
        else if (metric == Metric::L2)
          s = -std::max(qc.qsq[q] + cs->sqnorms[ids[i]] - 2.0f * s, 0.0f);
        if (!(std::fabs(s) <= std::numeric_limits<float>::max())) {
          sc.failed = true;
          continue;
        }
        if (s < thr) continue;
        h.offer(s, ids[i]);
        thr = h.threshold();
      }
    }
  }
};

}  // namespace

namespace {
constexpr EnumName<Codec> kCodecNames[] = {
    {Codec::Binary, "binary"}, {Codec::Int8, "int8"}, {Codec::None, "none"}};
}  // namespace

Codec parse_codec(const std::string& name) {
  if (name.empty()) return Codec::None;
  return enum_parse(kCodecNames, name, [&] {
    return "unknown codec '" + name + "'; expected 'binary', 'int8' or None";
  });
}

const char* codec_name(Codec c) { return enum_name(kCodecNames, c); }

std::size_t code_stride(Codec c, std::size_t dim) {
  switch (c) {
    case Codec::Binary: return words_of(dim) * 8;
    case Codec::Int8: return int8_len(dim);
    case Codec::None: return 0;
  }
  return 0;
}

void encode_rows(Codec c, const void* rows, std::size_t row_stride, bool f16, std::size_t n,
                 std::size_t dim, uint8_t* codes, float* factor, int32_t* count) {
  const std::size_t stride = code_stride(c, dim);
  std::vector<float> x(dim);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* out = codes + i * stride;
    std::memset(out, 0, stride);
    if (f16) {
      const uint16_t* h = static_cast<const uint16_t*>(rows) + i * row_stride;
      for (std::size_t j = 0; j < dim; ++j) x[j] = half_to_float(h[j]);
    } else {
      std::memcpy(x.data(), static_cast<const float*>(rows) + i * row_stride, dim * sizeof(float));
    }
    if (c == Codec::Binary) {
      double sq = 0.0, l1 = 0.0;
      int32_t bits = 0;
      uint64_t* words = reinterpret_cast<uint64_t*>(out);
      for (std::size_t j = 0; j < dim; ++j) {
        const double v = x[j];
        sq += v * v;
        l1 += std::fabs(v);
        if (v > 0.0) {
          words[j / 64] |= uint64_t(1) << (j % 64);
          ++bits;
        }
      }
      factor[i] = l1 > 0.0 ? static_cast<float>(sq / l1) : 0.f;
      count[i] = bits;
    } else if (c == Codec::Int8) {
      int8_t* c8 = reinterpret_cast<int8_t*>(out);
      factor[i] = quantize_int8(x.data(), dim, c8);
      int32_t sum = 0;
      for (std::size_t j = 0; j < dim; ++j) sum += c8[j];
      count[i] = sum;
    }
  }
}

void code_candidates(const float* queries, std::size_t nq, const CodeStore& codes,
                     std::size_t n_rows, const RowFilter& filter, std::size_t m, Metric metric,
                     int n_threads, int64_t* out_rows) {
  LAMINA_CHECK(codes.codec != Codec::None, "code_candidates needs a codec");
  LAMINA_CHECK(m >= 1, "m must be >= 1, got ", m);
  LAMINA_CHECK(n_rows <= 0xffffffffull, "at most 2^32 - 1 rows per search");
  const std::size_t d = codes.dim;
  CodeScorer S{&codes, &kernels(), metric, d, encode_queries(codes.codec, queries, nq, d, metric)};
  const std::size_t n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  // the cost of a code row: its bytes (a 64-byte line of int8 ~ 16 float multiply-adds)
  const std::size_t work = n_units * (codes.stride / 4 + 1) * std::max<std::size_t>(nq, 1);
  std::vector<std::vector<detail::Entry>> best;
  LAMINA_CHECK(detail::select_rows(nq, n_rows, filter, m, work, n_threads, S, best),
               "an estimated similarity is NaN or Inf: the vectors' or queries' values overflow "
               "float32; pass finite vectors of moderate magnitude");
  for (std::size_t q = 0; q < nq; ++q)
    for (std::size_t i = 0; i < m; ++i)
      out_rows[q * m + i] = i < best[q].size() ? int64_t(best[q][i].id) : -1;
}

const char* codec_isa() { return kernels().isa; }
void set_codec_isa(const std::string& name) { g_codec_isa.force(name); }

}  // namespace lamina
