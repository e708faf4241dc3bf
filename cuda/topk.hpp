// cuda/topk.hpp — exact top-k search on a CUDA device (host launcher API, no CUDA headers).
//
// Same contract as lamina/topk.hpp (ordering best first, ties -> smaller row id, padding id -1
// and score -inf for ip/cosine, +inf for l2; the same metric formulas), so the CPU search is the
// test oracle of this one. Scores accumulate in float32 for float32 and float16 rows.
//
// Structure: one pass over the rows computes dot products tile by tile and folds them at once
// into per-warp sorted top-k lists (a candidate is inserted only when it beats the list's k-th
// entry, so after warm-up almost every score costs one compare); no score matrix is
// materialised. Per-warp lists are then merged in passes of up to 32 lists per query.
//  * scan path (float32 rows; float16 rows with batch < 16 or k > 128; one namespace per
//    query): bandwidth-bound, each warp reads whole rows with 16-byte loads and serves up to
//    8 queries per read, lists in registers;
//  * tensor-core path (float16 rows, batch >= 16, k <= 128, no per-query namespaces): WMMA
//    m16n16k16 tiles of 64 queries x 128 rows, lists in shared memory. Queries are split into
//    hi + lo float16 parts after a per-query power-of-two scale, so the products keep ~22 bits
//    of the float32 query and accumulate in float32 (2 MMAs per product).
// Preconditions: all pointers are device pointers of the current device; rows are finite (or
// the call raises); 1 <= k <= kMaxK. The call is stream-ordered on `stream` and synchronises
// that stream once at the end to report NaN/Inf scores or a zero-norm cosine query as
// lamina::ValueError (as the CPU path does). Scratch memory is stream-ordered
// (cudaMallocAsync). Thread safety: reentrant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/topk.hpp"

namespace lamina::cuda {

/// Largest k the GPU search supports.
constexpr std::size_t kMaxK = 1024;

/// Rows on the device: row r starts at base + r * stride elements (float32 or binary16).
struct DeviceRows {
  const void* base = nullptr;
  std::size_t stride = 0;
  std::size_t dim = 0;
  bool f16 = false;
  const float* sqnorms = nullptr;  // optional |x_r|^2 per row (device)
};

/// Candidate filter (all device pointers). As RowFilter in lamina/topk.hpp, plus `segments`:
/// when set, query q scans only row_list[segments[2q] .. segments[2q+1]) (one namespace per
/// query, one launch for all queries); `max_segment` is the longest such range (host value).
struct DeviceFilter {
  const uint8_t* live = nullptr;
  const uint8_t* layers = nullptr;
  uint64_t layer_mask[4] = {~0ull, ~0ull, ~0ull, ~0ull};
  const uint32_t* row_list = nullptr;
  std::size_t row_list_len = 0;
  bool use_row_list = false;
  const int64_t* segments = nullptr;
  std::size_t max_segment = 0;
};

/// queries: nq x dim float32 (device, C-contiguous). Writes out_scores / out_ids [nq x k]
/// (device). Ids are row indices, or handles (generation << 32 | row) when `generations`
/// (device, one per row) is given.
void topk_search(const float* queries, std::size_t nq, const DeviceRows& rows,
                 std::size_t n_rows, const DeviceFilter& filter, std::size_t k, Metric metric,
                 const uint32_t* generations, float* out_scores, int64_t* out_ids, void* stream);

}  // namespace lamina::cuda
