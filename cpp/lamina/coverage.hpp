// cpp/lamina/coverage.hpp — the two row passes of the capacity projection's neighbour lists
// (python/lamina/memory/coverage.py, TurnNeighbours): each row lists up to k columns (I, -1 for
// a free slot) with their similarities (S), row-major. numpy did each pass as ~10 whole-array
// steps over the (rows x k) lists; here each is one loop.
#pragma once

#include <cstdint>

namespace lamina {

/// For each of the m rows `rows[i]`: the best listed entry (its similarity and column) whose
/// column c has on[c] != 0 and group[c] != group[rows[i]]; -inf and -1 when there is none. Ties
/// go to the first such entry of the row. I, S: shape (n_rows, k); on, group: shape (n_cols,).
/// Throws IndexError for a row outside [0, n_rows) or an entry outside [-1, n_cols).
void coverage_nearest(const int64_t* I, const float* S, int64_t n_rows, int64_t k, const int64_t* rows,
                      int64_t m, const uint8_t* on, const int64_t* group, int64_t n_cols, float* best,
                      int64_t* where);

/// Renumber the listed columns of rows 0..m-1 in place: entry c becomes remap[c] (shape
/// (n_cols,)); an entry that was listed (c >= 0) and maps to -1 becomes a free slot (S = -inf)
/// and its row's kth becomes -inf. Throws IndexError for an entry outside [-1, n_cols) or a
/// remapped column below -1 (checked before anything is written).
void coverage_remap(int64_t* I, float* S, float* kth, int64_t m, int64_t k, const int64_t* remap,
                    int64_t n_cols);

}  // namespace lamina
