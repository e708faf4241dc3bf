#include "lamina/groupby.hpp"

#include <algorithm>
#include <numeric>

#include "lamina/common.hpp"
#include "lamina/hashing.hpp"

namespace lamina {

namespace {

// Open-addressing map uint64 namespace -> dense id (insertion order), linear probing,
// power-of-two table kept at most half full.
class KeyIds {
 public:
  KeyIds() { rehash(1024); }

  uint32_t id_of(uint64_t key) {
    std::size_t h = fmix64(key) & mask_;
    for (;;) {
      const uint32_t id = ids_[h];
      if (id == kEmpty) break;
      if (keys_[h] == key) return id;
      h = (h + 1) & mask_;
    }
    const uint32_t id = static_cast<uint32_t>(order_.size());
    LAMINA_CHECK(id != kEmpty, "more than 2^32 - 1 distinct namespaces in one call");
    keys_[h] = key;
    ids_[h] = id;
    order_.push_back(key);
    if (order_.size() * 2 > ids_.size()) rehash(ids_.size() * 2);
    return id;
  }
  /// Distinct keys by id.
  const std::vector<uint64_t>& keys() const { return order_; }

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;
  void rehash(std::size_t cap) {
    keys_.assign(cap, 0);
    ids_.assign(cap, kEmpty);
    mask_ = cap - 1;
    for (uint32_t id = 0; id < order_.size(); ++id) {
      std::size_t h = fmix64(order_[id]) & mask_;
      while (ids_[h] != kEmpty) h = (h + 1) & mask_;
      keys_[h] = order_[id];
      ids_[h] = id;
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> ids_;
  std::vector<uint64_t> order_;
  std::size_t mask_ = 0;
};

}  // namespace

NamespaceGroups group_by_namespace(const uint64_t* namespaces, std::size_t n,
                                   const uint8_t* live, const int64_t* subset, std::size_t m) {
  // Pass 1: a dense id per considered row (runs of equal namespaces skip the hash lookup).
  std::vector<int64_t> rows_in;
  const int64_t* rows = subset;
  if (subset == nullptr) {
    if (live != nullptr) {
      rows_in.reserve(n);
      for (std::size_t r = 0; r < n; ++r)
        if (live[r]) rows_in.push_back(static_cast<int64_t>(r));
      rows = rows_in.data();
      m = rows_in.size();
    } else {
      m = n;
    }
  }
  KeyIds ids;
  std::vector<uint32_t> gid(m);
  std::vector<std::size_t> count;
  uint64_t last_key = 0;
  uint32_t last_id = 0;
  bool have_last = false;
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t r = rows ? static_cast<std::size_t>(rows[k]) : k;
    const uint64_t key = namespaces[r];
    if (!have_last || key != last_key) {
      last_id = ids.id_of(key);
      last_key = key;
      have_last = true;
      if (last_id == count.size()) count.push_back(0);
    }
    gid[k] = last_id;
    ++count[last_id];
  }

  // Distinct keys in ascending order.
  const std::vector<uint64_t>& by_id = ids.keys();
  const std::size_t G = by_id.size();
  std::vector<uint32_t> perm(G);
  std::iota(perm.begin(), perm.end(), 0u);
  std::sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) { return by_id[a] < by_id[b]; });
  NamespaceGroups out;
  out.keys.resize(G);
  out.offsets.assign(G + 1, 0);
  for (std::size_t g = 0; g < G; ++g) {
    out.keys[g] = by_id[perm[g]];
    out.offsets[g + 1] = out.offsets[g] + count[perm[g]];
  }

  // Pass 2: stable counting-sort scatter.
  out.rows.resize(m);
  for (std::size_t g = 0; g < G; ++g) count[perm[g]] = out.offsets[g];  // reuse: next slot by id
  for (std::size_t k = 0; k < m; ++k) {
    const int64_t r = rows ? rows[k] : static_cast<int64_t>(k);
    out.rows[count[gid[k]]++] = r;
  }
  return out;
}

}  // namespace lamina
