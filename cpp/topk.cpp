#include "lamina/topk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/enum_names.hpp"
#include "lamina/parallel.hpp"
#include "lamina/simd.hpp"
#include "topk_internal.hpp"

namespace lamina {

namespace {
constexpr EnumName<Metric> kMetricNames[] = {
    {Metric::IP, "ip"},         {Metric::IP, "inner_product"}, {Metric::IP, "dot"},
    {Metric::Cosine, "cosine"}, {Metric::Cosine, "cos"},       {Metric::L2, "l2"},
    {Metric::L2, "sqeuclidean"}};
}  // namespace

Metric parse_metric(const std::string& name) {
  return enum_parse(kMetricNames, name, [&] {
    return "unknown metric '" + name + "'; expected one of 'ip', 'cosine', 'l2'";
  });
}

const char* metric_name(Metric m) { return enum_name(kMetricNames, m); }

namespace {

using detail::kBlockRows;
constexpr std::size_t kQueryChunk = 64;

// Internal scores are "higher is better" for every metric (l2 distances are negated).
using detail::better;
using detail::Entry;
using detail::Heap;

struct Search {
  const float* Q;
  std::size_t nq, d, k;
  const RowStore* rows;
  Metric metric;
  const simd::DotKernels* kern;
  std::vector<float> qsq;   // |q|^2
  std::vector<float> qinv;  // 1/|q|

  // Score `cnt` candidate rows for queries [q0, q1) and fold them into heaps[q - q0].
  struct Scratch {
    std::vector<const void*> ptrs;
    std::vector<float> rn;
    std::vector<float> buf;  // scores of a block for up to kQueryChunk queries
    bool failed = false;     // a NaN/Inf score: reported by the caller
  };
  Scratch scratch() const {
    return Scratch{std::vector<const void*>(kBlockRows), std::vector<float>(kBlockRows),
                   std::vector<float>(std::min(kQueryChunk, std::max<std::size_t>(nq, 1)) *
                                      kBlockRows),
                   false};
  }

  void operator()(Scratch& sc, const uint32_t* ids, std::size_t cnt, std::size_t q0,
                  std::size_t q1, Heap* heaps) const {
    std::vector<const void*>& ptrs = sc.ptrs;
    std::vector<float>& rn = sc.rn;
    std::vector<float>& buf = sc.buf;
    bool& nonfinite = sc.failed;
    const RowStore& rs = *rows;
    const std::size_t elt = rs.f16 ? 2 : 4;
    const char* base = static_cast<const char*>(rs.base);
    for (std::size_t i = 0; i < cnt; ++i) ptrs[i] = base + (std::size_t)ids[i] * rs.stride * elt;
    if (metric != Metric::IP) {
      if (rs.sqnorms) {
        for (std::size_t i = 0; i < cnt; ++i) rn[i] = rs.sqnorms[ids[i]];
      } else if (rs.f16) {
        kern->sqnorm_f16(reinterpret_cast<const uint16_t* const*>(ptrs.data()), cnt, d, rn.data());
      } else {
        kern->sqnorm_f32(reinterpret_cast<const float* const*>(ptrs.data()), cnt, d, rn.data());
      }
      if (metric == Metric::Cosine)
        for (std::size_t i = 0; i < cnt; ++i) rn[i] = rn[i] > 0.f ? 1.0f / std::sqrt(rn[i]) : 0.f;
    }
    for (std::size_t qc = q0; qc < q1; qc += kQueryChunk) {
      const std::size_t nqc = std::min(kQueryChunk, q1 - qc);
      if (rs.f16)
        kern->dot_f16(Q + qc * d, nqc, d, reinterpret_cast<const uint16_t* const*>(ptrs.data()),
                      cnt, d, buf.data(), cnt);
      else
        kern->dot_f32(Q + qc * d, nqc, d, reinterpret_cast<const float* const*>(ptrs.data()), cnt,
                      d, buf.data(), cnt);
      for (std::size_t qi = 0; qi < nqc; ++qi) {
        float* s = buf.data() + qi * cnt;
        const std::size_t q = qc + qi;
        if (metric == Metric::Cosine) {
          const float qv = qinv[q];
          for (std::size_t i = 0; i < cnt; ++i) s[i] = s[i] * qv * rn[i];
        } else if (metric == Metric::L2) {
          const float qn = qsq[q];
          for (std::size_t i = 0; i < cnt; ++i) s[i] = -std::max(qn + rn[i] - 2.0f * s[i], 0.0f);
        }
        Heap& h = heaps[q - q0];
        float thr = h.threshold();
        for (std::size_t i = 0; i < cnt; ++i) {
          const float v = s[i];
          if (!(std::fabs(v) <= std::numeric_limits<float>::max())) {
            nonfinite = true;  // NaN/Inf input or float32 overflow: reported by the caller
            continue;
          }
          if (v < thr) continue;
          h.offer(v, ids[i]);
          thr = h.threshold();
        }
      }
    }
  }
};

}  // namespace

void topk_search(const float* queries, std::size_t nq, const RowStore& rows, std::size_t n_rows,
                 const RowFilter& filter, std::size_t k, Metric metric, int n_threads,
                 float* out_scores, int64_t* out_ids) {
  LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
  LAMINA_CHECK(rows.dim >= 1, "dimension must be >= 1");
  LAMINA_CHECK(n_rows <= 0xffffffffull, "at most 2^32 - 1 rows per search");
  const std::size_t d = rows.dim;
  Search S;
  S.Q = queries;
  S.nq = nq;
  S.d = d;
  S.k = k;
  S.rows = &rows;
  S.metric = metric;
  S.kern = &simd::kernels();
  if (metric != Metric::IP) {
    S.qsq.resize(nq);
    std::vector<const float*> qp(nq);
    for (std::size_t q = 0; q < nq; ++q) qp[q] = queries + q * d;
    S.kern->sqnorm_f32(qp.data(), nq, d, S.qsq.data());
    if (metric == Metric::Cosine) {
      S.qinv.resize(nq);
      for (std::size_t q = 0; q < nq; ++q) {
        LAMINA_CHECK(S.qsq[q] > 0.f, "query ", q, " has zero norm; cosine similarity is undefined");
        S.qinv[q] = 1.0f / std::sqrt(S.qsq[q]);
      }
    }
  }

  const std::size_t n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  const std::size_t work = n_units * d * std::max<std::size_t>(nq, 1);
  std::vector<std::vector<Entry>> best;
  LAMINA_CHECK(detail::select_rows(nq, n_rows, filter, k, work, n_threads, S, best),
               "a similarity score is NaN or Inf: the vectors or queries contain NaN/Inf, or "
               "their values overflow float32; pass finite vectors of moderate magnitude");

  const float pad = metric == Metric::L2 ? std::numeric_limits<float>::infinity()
                                         : -std::numeric_limits<float>::infinity();
  for (std::size_t q = 0; q < nq; ++q) {
    const std::vector<Entry>& merged = best[q];
    const std::size_t m = merged.size();
    for (std::size_t i = 0; i < k; ++i) {
      if (i < m) {
        out_scores[q * k + i] = metric == Metric::L2 ? -merged[i].s : merged[i].s;
        out_ids[q * k + i] = merged[i].id;
      } else {
        out_scores[q * k + i] = pad;
        out_ids[q * k + i] = -1;
      }
    }
  }
}

void inner_products(const float* queries, std::size_t nq, const RowStore& rows,
                    std::size_t n_rows, int n_threads, float* out) {
  LAMINA_CHECK(rows.dim >= 1, "dimension must be >= 1");
  if (!nq || !n_rows) return;
  const std::size_t d = rows.dim;
  const simd::DotKernels& kern = simd::kernels();
  const std::size_t n_blocks = (n_rows + detail::kBlockRows - 1) / detail::kBlockRows;
  const int T = threads_for(nq * n_rows * d, std::size_t(1) << 20, n_threads);
  const std::size_t elt = rows.f16 ? 2 : 4;
  const char* base = static_cast<const char*>(rows.base);
  parallel_for(n_blocks, T, [&](std::size_t b, int) {
    const std::size_t r0 = b * detail::kBlockRows;
    const std::size_t cnt = std::min(detail::kBlockRows, n_rows - r0);
    std::vector<const void*> ptrs(cnt);
    for (std::size_t i = 0; i < cnt; ++i) ptrs[i] = base + (r0 + i) * rows.stride * elt;
    if (rows.f16)
      kern.dot_f16(queries, nq, d, reinterpret_cast<const uint16_t* const*>(ptrs.data()), cnt, d,
                   out + r0, n_rows);
    else
      kern.dot_f32(queries, nq, d, reinterpret_cast<const float* const*>(ptrs.data()), cnt, d,
                   out + r0, n_rows);
  });
}

}  // namespace lamina

