// cuda/codec.hpp — the compressed candidate scan on a CUDA device (host launcher API).
//
// Same rule as lamina/codec.hpp (binary: 4-bit query planes against sign bits; int8: integer
// dot products of the quantised query and rows; the estimate of <q, x> turned into the metric's
// score), so the CPU scan (lamina::code_candidates) is its test oracle: the integer part is
// exact on both, the float estimate rounds alike up to float contraction.
// Structure: lane per row (a binary row is 48 bytes for 384 dims, an int8 row 384), the
// estimate folded into per-warp sorted lists of m candidates (topk_select.cuh), lists merged
// to one per query (topk_parts.cuh), then compacted into a row list with one segment per
// query, which the exact scan (topk.hpp) re-scores from the float rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/codec.hpp"
#include "topk.hpp"

namespace lamina::cuda {

/// Codes on the device: the CPU's CodeStore layout (row r's code at base + r * stride bytes,
/// its constants factor[r], count[r], its squared norm sqnorms[r]) with every pointer a device
/// pointer.
using DeviceCodes = ::lamina::CodeStore;

/// The filter of the re-ranking search over code_candidates' output (`cand`: nq · m row ids,
/// `seg`: one range of it per query); the code scan applied every other filter already.
inline DeviceFilter candidate_filter(const uint32_t* cand, const int64_t* seg, std::size_t nq,
                                     std::size_t m) {
  DeviceFilter g;
  g.use_row_list = true;
  g.row_list = cand;
  g.row_list_len = nq * m;
  g.segments = seg;
  g.max_segment = m;
  return g;
}

/// The best m rows per query by the code estimate, among the rows `filter` admits (live /
/// layers / row list / one segment per query, as in topk_search). `queries`: host memory,
/// nq x dim float32 (encoded on the host, a few hundred bytes per query). Writes, in device
/// memory, out_rows[q * m + i] (row ids, best first) and out_seg[2q], out_seg[2q + 1], the
/// range of out_rows that holds query q's candidates — the row list and segments of the
/// re-ranking search. 1 <= m <= kMaxK. Stream-ordered on `stream`; synchronises once.
void code_candidates(const float* queries, std::size_t nq, const DeviceCodes& codes,
                     std::size_t n_rows, const DeviceFilter& filter, std::size_t m, Metric metric,
                     uint32_t* out_rows, int64_t* out_seg, void* stream);

}  // namespace lamina::cuda
