// cuda/topk_enqueue.cuh — internal to cuda/*.cu: the exact GPU top-k (topk.hpp) split into
// its stream work and its error report, so that a caller can queue several searches (or capture
// them into a CUDA graph) and synchronise once.
#pragma once

#include <cuda_runtime.h>

#include "check.cuh"
#include "topk.hpp"

namespace lamina::cuda::detail {

/// Error words the search kernels raise (offsets from the `flags` pointer given to
/// topk_enqueue): NaN/Inf score, zero-norm cosine query, NaN/Inf query.
enum : int { kTopkNonFinite = 0, kTopkZeroQuery = 1, kTopkBadQuery = 2, kTopkWords = 3 };

/// Rows of one segment scanned per block of the segmented scan (its grid has
/// ceil(max_segment / kSegmentRowsPerBlock) blocks per query).
constexpr std::size_t kSegmentRowsPerBlock = 2048;

/// topk_search's checks and launches, queued on `st` with no synchronisation and no host
/// reads: scratch from `scr` (a Workspace-backed Scratch makes the sequence capturable), error
/// words written to flags[0 .. kTopkWords) (host-mapped or device memory the caller zeroed).
/// With `filter.segments`, the grid is sized from `filter.max_segment` (a larger value than
/// the longest segment is allowed: the blocks past a segment's end find no rows).
void topk_enqueue(const float* queries, std::size_t nq, const DeviceRows& rows,
                  std::size_t n_rows, const DeviceFilter& filter, std::size_t k, Metric metric,
                  const uint32_t* generations, float* out_scores, int64_t* out_ids, Scratch& scr,
                  unsigned* flags, cudaStream_t st);

/// Raise topk_search's errors from the words (read after the stream was synchronised).
void topk_raise(unsigned bad_query, unsigned zero_query, unsigned non_finite);

}  // namespace lamina::cuda::detail
