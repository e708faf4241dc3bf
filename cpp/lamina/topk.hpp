// lamina/topk.hpp — exact top-k search with fused selection.
//
// Scores are computed block by block (kBlockRows rows at a time, for up to kQueryChunk queries)
// into a small buffer and folded into per-query bounded heaps right away: a full b x n score
// matrix is never materialised. Rows are split across threads (each thread streams its own part
// of the matrix once for all queries); per-thread heaps are merged at the end.
//
// Ordering and ties: results are sorted best first; "best" is the highest score for "ip" and
// "cosine" and the smallest distance for "l2". Equal scores are ordered by the smaller row id
// first. The result is therefore unique and independent of the thread count.
// Padding: when fewer than k candidates exist, the tail holds id -1 and score -inf (ip,
// cosine) or +inf (l2).
// Metrics: ip = <q, x>; cosine = <q, x> / (|q| |x|) (a zero row scores 0); l2 = squared
// Euclidean distance |q|^2 + |x|^2 - 2<q, x>, clamped at 0 (the FAISS formulation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lamina {

enum class Metric : int { IP = 0, Cosine = 1, L2 = 2 };

/// "ip" | "cosine" | "l2" -> Metric; throws ValueError otherwise.
Metric parse_metric(const std::string& name);
const char* metric_name(Metric m);

/// Rows to search: row r starts at base + r * stride elements; `f16` selects IEEE binary16
/// storage (else float32). `sqnorms` (optional) holds |x_r|^2 per row; when null it is
/// computed on the fly where the metric needs it.
struct RowStore {
  const void* base = nullptr;
  std::size_t stride = 0;
  std::size_t dim = 0;
  bool f16 = false;
  const float* sqnorms = nullptr;
};

/// Optional filter on candidate rows. Rows with live[r] == 0 are skipped; rows whose
/// layer is not allowed by `layer_mask` (bit l of the 256-bit mask) are skipped; when
/// `ns_list` is set, only those rows (and only them) are candidates.
struct RowFilter {
  const uint8_t* live = nullptr;      // null: all rows live
  const uint8_t* layers = nullptr;    // per-row layer column (null: no layer filter)
  uint64_t layer_mask[4] = {~0ull, ~0ull, ~0ull, ~0ull};
  const uint64_t* ns = nullptr;       // per-row namespace column; with it only rows whose
  uint64_t ns_value = 0;              //   namespace == ns_value are candidates
  const uint32_t* row_list = nullptr; // explicit candidate rows (e.g. one namespace's rows)
  std::size_t row_list_len = 0;
  bool use_row_list = false;
  const uint8_t* allow = nullptr;     // allow-mask over rows (null: every row); row r is a
  std::size_t allow_len = 0;          //   candidate only if r < allow_len and allow[r] != 0
};

/// Search `nq` queries (row-major, nq x dim float32, finite) against `n_rows` rows.
/// Writes out_scores[nq x k] and out_ids[nq x k] (row ids, -1 padding).
/// `n_threads` <= 0: default thread count. Releases nothing itself (callers release the GIL).
void topk_search(const float* queries, std::size_t nq, const RowStore& rows, std::size_t n_rows,
                 const RowFilter& filter, std::size_t k, Metric metric, int n_threads,
                 float* out_scores, int64_t* out_ids);

/// All inner products of `nq` queries (row-major, nq x dim float32) with `n_rows` rows:
/// out[q * n_rows + r] = <query q, row r>, the very bits topk_search's "ip" scores have for the
/// pair (one summation order for every ISA and tile: lamina/simd.hpp), so that a decision taken
/// on these scores and one taken on search results agree exactly. Rows are split over up to
/// `n_threads` threads (<= 0: the default) for large products. Releases nothing itself.
void inner_products(const float* queries, std::size_t nq, const RowStore& rows,
                    std::size_t n_rows, int n_threads, float* out);

}  // namespace lamina
