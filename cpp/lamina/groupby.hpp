// lamina/groupby.hpp — grouping rows by their uint64 namespace in O(n): one hash pass assigns
// dense group ids, the distinct namespaces are sorted, and a stable counting sort lays the
// rows out group after group. Used by the capacity projection (evict.hpp) and select_hot.
//
// Thread safety: pure function of its inputs; reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lamina {

struct NamespaceGroups {
  std::vector<uint64_t> keys;         // the distinct namespaces, ascending; G = keys.size()
  std::vector<std::size_t> offsets;   // G + 1 offsets into `rows`
  std::vector<int64_t> rows;          // row indices, group by group, in input order per group
  std::size_t size(std::size_t g) const { return offsets[g + 1] - offsets[g]; }
};

/// Groups the rows 0..n-1 (skipping rows with live[r] == 0 when `live` is given), or, when
/// `subset` is given, the m rows subset[0..m) (each in [0, n); `live` is then ignored).
/// Within a group rows keep the order in which they were given (ascending for 0..n-1).
NamespaceGroups group_by_namespace(const uint64_t* namespaces, std::size_t n,
                                   const uint8_t* live, const int64_t* subset, std::size_t m);

}  // namespace lamina
