#include "lamina/slot_table.hpp"

#include <algorithm>

#include "lamina/common.hpp"

namespace lamina {

std::size_t SlotTable::grown_capacity(std::size_t min_capacity) const {
  LAMINA_CHECK(min_capacity < 0xffffffffull, "arena capacity is limited to 2^32 - 1 rows");
  const std::size_t cap = std::max<std::size_t>(capacity() * 2, min_capacity);
  return std::min<std::size_t>(cap, 0xfffffffeull);
}

void SlotTable::resize(std::size_t capacity) {
  ns_.resize(capacity);
  layer_.resize(capacity);
  live_.resize(capacity);
  gen_.resize(capacity);
  ns_pos_.resize(capacity);
}

std::size_t SlotTable::rows_past_high_water(std::size_t n) const {
  return n - std::min(n, free_.size());
}

uint32_t SlotTable::acquire(uint64_t ns, uint8_t layer) {
  uint32_t row;
  if (!free_.empty()) {
    row = free_.back();
    free_.pop_back();
  } else {
    LAMINA_ASSERT(high_water_ < capacity());
    row = static_cast<uint32_t>(high_water_++);
    gen_[row] = 0;
  }
  ns_[row] = ns;
  layer_[row] = layer;
  live_[row] = 1;
  auto& lst = ns_rows_[ns];
  ns_pos_[row] = static_cast<uint32_t>(lst.size());
  lst.push_back(row);
  ++live_count_;
  return row;
}

void SlotTable::release(uint32_t row) {
  auto it = ns_rows_.find(ns_[row]);
  LAMINA_ASSERT(it != ns_rows_.end());
  auto& lst = it->second;
  const uint32_t pos = ns_pos_[row];
  LAMINA_ASSERT(pos < lst.size() && lst[pos] == row);
  lst[pos] = lst.back();
  ns_pos_[lst[pos]] = pos;
  lst.pop_back();
  if (lst.empty()) ns_rows_.erase(it);
  live_[row] = 0;
  ns_[row] = 0;
  layer_[row] = 0;
  --live_count_;
  if (gen_[row] < kMaxGeneration) {
    ++gen_[row];
    free_.push_back(row);
  }  // else: the row is retired for good, so no handle can ever repeat
}

uint32_t SlotTable::row_of(int64_t h) const {
  LAMINA_CHECK_INDEX(h >= 0, "slot ", h, " is not a valid slot (negative)");
  const uint64_t row = static_cast<uint64_t>(h) & 0xffffffffull;
  const uint64_t gen = static_cast<uint64_t>(h) >> 32;
  LAMINA_CHECK_INDEX(row < high_water_, "slot ", h, " is out of range (arena has ", high_water_,
                     " rows)");
  LAMINA_CHECK_INDEX(live_[row] && gen_[row] == gen, "slot ", h,
                     " is stale: its row was removed (and possibly reused)");
  return static_cast<uint32_t>(row);
}

std::vector<uint32_t> SlotTable::rows_of(const int64_t* handles, std::size_t n) const {
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of(handles[i]);
  return rows;
}

std::vector<uint32_t> SlotTable::rows_to_remove(const int64_t* handles, std::size_t n) const {
  std::vector<uint32_t> rows = rows_of(handles, n);
  std::vector<uint32_t> sorted(rows);
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  LAMINA_CHECK(dup == sorted.end(), "slot for row ", (dup == sorted.end() ? 0 : *dup),
               " appears more than once in remove(); pass each slot once");
  return rows;
}

void SlotTable::rows_to_handles(int64_t* ids, std::size_t n) const {
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t r = ids[i];
    if (r >= 0) ids[i] = handle(gen_[r], static_cast<uint32_t>(r));
  }
}

void SlotTable::contains(const int64_t* handles, std::size_t n, uint8_t* out) const {
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t h = handles[i];
    const uint64_t row = static_cast<uint64_t>(h) & 0xffffffffull;
    const uint64_t gen = static_cast<uint64_t>(h) >> 32;
    out[i] = h >= 0 && row < high_water_ && live_[row] && gen_[row] == gen;
  }
}

void SlotTable::namespaces_of(const int64_t* handles, std::size_t n, uint64_t* out) const {
  const std::vector<uint32_t> rows = rows_of(handles, n);
  for (std::size_t i = 0; i < n; ++i) out[i] = ns_[rows[i]];
}

void SlotTable::layers_of(const int64_t* handles, std::size_t n, uint8_t* out) const {
  const std::vector<uint32_t> rows = rows_of(handles, n);
  for (std::size_t i = 0; i < n; ++i) out[i] = layer_[rows[i]];
}

void SlotTable::columns(std::vector<uint64_t>& ns, std::vector<uint8_t>& layers,
                        std::vector<uint8_t>& live) const {
  ns.assign(ns_.begin(), ns_.begin() + high_water_);
  layers.assign(layer_.begin(), layer_.begin() + high_water_);
  live.assign(live_.begin(), live_.begin() + high_water_);
}

const std::vector<uint32_t>& SlotTable::rows_in(uint64_t ns) const {
  static const std::vector<uint32_t> kEmpty;
  auto it = ns_rows_.find(ns);
  return it == ns_rows_.end() ? kEmpty : it->second;
}

}  // namespace lamina
