// cuda/code_enqueue.cuh — internal to cuda/*.cu: the GPU code scan (codec.hpp) split into
// its stream work and its error report, with the queries' codes already in device memory, so
// that a caller can queue it (or capture it into a CUDA graph) and synchronise once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "check.cuh"
#include "codec.hpp"

namespace lamina::cuda::detail {

/// Error word of the code scan (offset from the `flags` given to code_enqueue): an estimate is
/// NaN/Inf.
enum : int { kCodeNonFinite = 0, kCodeWords = 1 };

/// A batch of queries in the codec's query form (lamina::QueryCodes), in device memory.
struct DeviceQueryCodes {
  int W = 0, L = 0;
  const uint64_t* planes = nullptr;  // binary
  const float* lo = nullptr;
  const float* delta = nullptr;
  const float* usum = nullptr;
  const int8_t* q8 = nullptr;  // int8
  const float* scale = nullptr;
  const float* qsq = nullptr;
  const float* qinv = nullptr;
};

/// Bytes of nq queries' codes laid out by stage_query_codes (16-byte aligned parts).
std::size_t query_codes_bytes(Codec c, std::size_t nq, std::size_t dim);

/// Encode nq host queries (lamina::encode_queries: ValueError on NaN/Inf, or a zero query under
/// cosine) into `host` (query_codes_bytes of them) and return the device view of the same
/// layout at `device` (where the caller copies `host` to, before the scan runs).
DeviceQueryCodes stage_query_codes(Codec c, const float* queries, std::size_t nq,
                                   std::size_t dim, Metric metric, unsigned char* host,
                                   const unsigned char* device);

/// code_candidates' launches, queued on `st` with no synchronisation and no host reads:
/// scratch from `scr`, the error word at flags[kCodeNonFinite]. With `filter.segments` the grid
/// is sized from `filter.max_segment` (larger than the longest segment is allowed).
void code_enqueue(const DeviceQueryCodes& q, std::size_t nq, const DeviceCodes& codes,
                  std::size_t n_rows, const DeviceFilter& filter, std::size_t m, Metric metric,
                  uint32_t* out_rows, int64_t* out_seg, Scratch& scr, unsigned* flags,
                  cudaStream_t st);

/// Raise code_candidates' error from its word (read after the stream was synchronised).
void code_raise(unsigned non_finite);

}  // namespace lamina::cuda::detail
