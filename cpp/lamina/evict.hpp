// lamina/evict.hpp — the capacity projection Π_C of Algorithm 1 (lines 7, 13, 19): keep at most
// C rows per namespace, evicting the lowest-scoring ones (scores: e.g. heat × strength).
//
// Inputs: scores[n] float32, namespaces[n] uint64, optional live[n] (uint8/bool; rows with 0
// are ignored: never counted, never returned). Capacity: `default_capacity` for every
// namespace (-1 = unbounded), overridden per namespace by the pairs (cap_keys[k],
// cap_values[k]) (k < n_caps; keys unique, values >= 0). So "a mapping only" is
// default_capacity = -1: namespaces not in the mapping are unbounded.
//
// Result: the row indices to evict, ascending. For every namespace holding c > C live rows,
// exactly c − C rows: those that come first in the order "lower score first; among equal
// scores the larger index first" (kmath::evict_before) — so among ties the smaller (older)
// index is kept, as in top-k. Deterministic and independent of the thread count.
//
// Cost: O(n) grouping (groupby.hpp) + nth_element per over-full namespace (O(c) each, groups
// processed in parallel) + O(n) output. 1M rows x 10k namespaces: a few ms per core.
//
// Errors (lamina::ValueError): NaN or ±Inf in the score of a live row (dead rows are not
// read), default_capacity < -1, a negative capacity in the mapping, duplicate mapping
// keys. Reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lamina {

std::vector<int64_t> evict_to_capacity(const float* scores, const uint64_t* namespaces,
                                       std::size_t n, const uint8_t* live,
                                       int64_t default_capacity, const uint64_t* cap_keys,
                                       const int64_t* cap_values, std::size_t n_caps,
                                       int threads);

}  // namespace lamina
