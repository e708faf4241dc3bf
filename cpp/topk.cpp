#include "lamina/topk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/parallel.hpp"
#include "lamina/simd.hpp"

namespace lamina {

Metric parse_metric(const std::string& name) {
  if (name == "ip" || name == "inner_product" || name == "dot") return Metric::IP;
  if (name == "cosine" || name == "cos") return Metric::Cosine;
  if (name == "l2" || name == "sqeuclidean") return Metric::L2;
  throw ValueError("unknown metric '" + name + "'; expected one of 'ip', 'cosine', 'l2'");
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::IP: return "ip";
    case Metric::Cosine: return "cosine";
    case Metric::L2: return "l2";
  }
  return "?";
}

namespace {

constexpr std::size_t kBlockRows = 256;
constexpr std::size_t kQueryChunk = 64;

// Internal scores are "higher is better" for every metric (l2 distances are negated).
struct Entry {
  float s;
  uint32_t id;
};
inline bool better(const Entry& a, const Entry& b) {
  return a.s > b.s || (a.s == b.s && a.id < b.id);
}

// Bounded heap whose root is the worst kept entry.
struct Heap {
  Entry* e;
  uint32_t size;
  uint32_t cap;

  float threshold() const {
    return size < cap ? -std::numeric_limits<float>::infinity() : e[0].s;
  }
  void offer(float s, uint32_t id) {
    if (size < cap) {
      std::size_t i = size++;
      e[i] = {s, id};
      while (i > 0) {  // sift up: parent must be worse than child
        std::size_t p = (i - 1) / 2;
        if (better(e[i], e[p])) break;
        std::swap(e[i], e[p]);
        i = p;
      }
      return;
    }
    Entry x{s, id};
    if (!better(x, e[0])) return;
    std::size_t i = 0;
    for (;;) {  // sift down: move the worse child up while it is worse than x
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l >= size) break;
      std::size_t c = l;
      if (r < size && better(e[l], e[r])) c = r;
      if (!better(x, e[c])) break;
      e[i] = e[c];
      i = c;
    }
    e[i] = x;
  }
};

struct Search {
  const float* Q;
  std::size_t nq, d, k;
  const RowStore* rows;
  const RowFilter* filter;
  Metric metric;
  const simd::DotKernels* kern;
  std::vector<float> qsq;   // |q|^2
  std::vector<float> qinv;  // 1/|q|

  bool row_passes(uint32_t r) const {
    const RowFilter& f = *filter;
    if (f.live && !f.live[r]) return false;
    if (f.ns && f.ns[r] != f.ns_value) return false;
    if (f.layers) {
      const uint8_t l = f.layers[r];
      if (!((f.layer_mask[l >> 6] >> (l & 63)) & 1ull)) return false;
    }
    return true;
  }

  // Score `cnt` candidate rows for queries [q0, q1) and fold them into heaps[q - q0].
  void score_block(const uint32_t* ids, std::size_t cnt, std::size_t q0, std::size_t q1,
                   Heap* heaps, std::vector<const void*>& ptrs, std::vector<float>& rn,
                   std::vector<float>& buf, bool& nonfinite) const {
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
  S.filter = &filter;
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

  // Units: candidate rows (range) or positions in the explicit row list.
  const std::size_t n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  const std::size_t cap = std::min<std::size_t>(k, std::max<std::size_t>(n_units, 1));
  const std::size_t n_blocks = (n_units + kBlockRows - 1) / kBlockRows;
  const std::size_t work = n_units * d * std::max<std::size_t>(nq, 1);
  const int T = threads_for(work, std::size_t(1) << 20, n_threads);
  const std::size_t P = std::max<std::size_t>(1, std::min<std::size_t>(T, n_blocks));
  std::size_t G = std::max<std::size_t>(1, (static_cast<std::size_t>(T) + P - 1) / P);
  G = std::min(G, std::max<std::size_t>(nq, 1));
  const std::size_t q_per_g = (nq + G - 1) / std::max<std::size_t>(G, 1);

  std::vector<Entry> store(P * nq * cap);
  std::vector<Heap> heaps(P * nq);
  for (std::size_t p = 0; p < P; ++p)
    for (std::size_t q = 0; q < nq; ++q)
      heaps[p * nq + q] = Heap{store.data() + (p * nq + q) * cap, 0, static_cast<uint32_t>(cap)};

  const bool any_filter = filter.live || filter.layers || filter.ns;
  std::vector<char> bad(P * G, 0);
  parallel_for(P * G, T, [&](std::size_t task, int) {
    const std::size_t p = task / G, g = task % G;
    const std::size_t q0 = g * q_per_g, q1 = std::min(nq, q0 + q_per_g);
    if (q0 >= q1) return;
    const std::size_t u0 = n_units * p / P, u1 = n_units * (p + 1) / P;
    std::vector<uint32_t> ids(kBlockRows);
    std::vector<const void*> ptrs(kBlockRows);
    std::vector<float> rn(kBlockRows);
    std::vector<float> buf(kQueryChunk * kBlockRows);
    Heap* hp = heaps.data() + p * nq + q0;
    std::size_t cnt = 0;
    bool nonfinite = false;
    for (std::size_t u = u0; u < u1; ++u) {
      const uint32_t r = filter.use_row_list ? filter.row_list[u] : static_cast<uint32_t>(u);
      if (any_filter && !S.row_passes(r)) continue;
      ids[cnt++] = r;
      if (cnt == kBlockRows) {
        S.score_block(ids.data(), cnt, q0, q1, hp, ptrs, rn, buf, nonfinite);
        cnt = 0;
      }
    }
    if (cnt) S.score_block(ids.data(), cnt, q0, q1, hp, ptrs, rn, buf, nonfinite);
    bad[task] = nonfinite;
  });
  LAMINA_CHECK(std::none_of(bad.begin(), bad.end(), [](char b) { return b != 0; }),
               "a similarity score is NaN or Inf: the vectors or queries contain NaN/Inf, or "
               "their values overflow float32; pass finite vectors of moderate magnitude");

  const float pad = metric == Metric::L2 ? std::numeric_limits<float>::infinity()
                                         : -std::numeric_limits<float>::infinity();
  std::vector<Entry> merged;
  for (std::size_t q = 0; q < nq; ++q) {
    merged.clear();
    for (std::size_t p = 0; p < P; ++p) {
      const Heap& h = heaps[p * nq + q];
      merged.insert(merged.end(), h.e, h.e + h.size);
    }
    std::sort(merged.begin(), merged.end(), better);
    const std::size_t m = std::min(k, merged.size());
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

}  // namespace lamina
