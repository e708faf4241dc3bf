// lamina/slot_table.hpp — the host bookkeeping of a vector arena: which rows are live, their
// namespace and layer, their generation, the free list, and the rows of each namespace.
//
// Shared by VectorArena (lamina/arena.hpp) and the CUDA arena (cuda/arena.hpp): the row data
// lives wherever the arena keeps it; this table says which row a handle names.
//
// Handles ("slots") are (generation << 32) | row. A fresh row has generation 0; release()
// bumps it, so a handle kept after removal is refused (IndexError) even once the row is reused.
// A row whose generation reaches 2^31 - 1 is retired for good (handles stay non-negative and
// never repeat). Released rows are reused last-freed first.
//
// Thread safety: none; the owning arena holds its reader/writer lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace lamina {

class SlotTable {
 public:
  static constexpr uint32_t kMaxGeneration = 0x7fffffffu;  // keeps handles non-negative
  static int64_t handle(uint32_t generation, uint32_t row) {
    return (static_cast<int64_t>(generation) << 32) | static_cast<int64_t>(row);
  }

  std::size_t capacity() const { return live_.size(); }
  std::size_t high_water() const { return high_water_; }  // rows ever used (live + dead)
  std::size_t live_count() const { return live_count_; }

  /// The capacity to grow to for at least `min_capacity` rows (doubling; ValueError past
  /// 2^32 - 2 rows). The arena allocates its rows, then calls resize() with it.
  std::size_t grown_capacity(std::size_t min_capacity) const;
  /// Grow the columns to `capacity` rows (new rows: dead, namespace 0, layer 0).
  void resize(std::size_t capacity);
  /// Rows the next `n` acquire() calls take past the high-water mark (the rest reuse rows).
  std::size_t rows_past_high_water(std::size_t n) const;
  /// Make a row live with this namespace and layer (capacity() must allow it); returns it.
  uint32_t acquire(uint64_t ns, uint8_t layer);
  /// Make a live row dead: namespace and layer 0, generation bumped, row freed for reuse.
  void release(uint32_t row);

  /// The row a handle names (IndexError: negative, out of range, or stale).
  uint32_t row_of(int64_t handle) const;
  std::vector<uint32_t> rows_of(const int64_t* handles, std::size_t n) const;
  /// rows_of(), and ValueError if a handle appears twice (remove() is all-or-nothing).
  std::vector<uint32_t> rows_to_remove(const int64_t* handles, std::size_t n) const;
  int64_t handle_of(uint32_t row) const { return handle(gen_[row], row); }
  /// Row indices to handles in place (-1 padding stays).
  void rows_to_handles(int64_t* ids, std::size_t n) const;

  uint64_t ns(uint32_t row) const { return ns_[row]; }
  uint8_t layer(uint32_t row) const { return layer_[row]; }
  uint32_t generation(uint32_t row) const { return gen_[row]; }
  void set_layer(uint32_t row, uint8_t layer) { layer_[row] = layer; }

  /// Per handle: 1 where it names a live row (no error for bad handles).
  void contains(const int64_t* handles, std::size_t n, uint8_t* out) const;
  void namespaces_of(const int64_t* handles, std::size_t n, uint64_t* out) const;
  void layers_of(const int64_t* handles, std::size_t n, uint8_t* out) const;
  /// Copies of the columns up to the high-water mark.
  void columns(std::vector<uint64_t>& ns, std::vector<uint8_t>& layers,
               std::vector<uint8_t>& live) const;
  /// Live rows of a namespace (unordered) and their count.
  const std::vector<uint32_t>& rows_in(uint64_t ns) const;
  std::size_t namespace_size(uint64_t ns) const { return rows_in(ns).size(); }

  /// The columns (capacity() entries) for the scans.
  const uint64_t* ns_column() const { return ns_.data(); }
  const uint8_t* layer_column() const { return layer_.data(); }
  const uint8_t* live_column() const { return live_.data(); }

 private:
  std::size_t high_water_ = 0;
  std::size_t live_count_ = 0;
  std::vector<uint64_t> ns_;
  std::vector<uint8_t> layer_;
  std::vector<uint8_t> live_;
  std::vector<uint32_t> gen_;
  std::vector<uint32_t> free_;  // released rows available for reuse (LIFO)
  std::unordered_map<uint64_t, std::vector<uint32_t>> ns_rows_;
  std::vector<uint32_t> ns_pos_;  // position of a live row in ns_rows_[ns_[row]]
};

/// What both arenas share besides the rows: the reader/writer lock, the slot table, and the
/// reads that need nothing else (taken under the reader lock). Arenas derive from it.
class ArenaSlots {
 public:
  std::size_t capacity() const {
    std::shared_lock lk(mu_);
    return slots_.capacity();
  }
  std::size_t size() const {  // live rows
    std::shared_lock lk(mu_);
    return slots_.live_count();
  }
  std::size_t high_water() const {  // rows ever used (live + dead)
    std::shared_lock lk(mu_);
    return slots_.high_water();
  }
  /// Columns of given handles (IndexError for a stale or unknown handle).
  void namespaces_of(const int64_t* handles, std::size_t n, uint64_t* out) const {
    std::shared_lock lk(mu_);
    slots_.namespaces_of(handles, n, out);
  }
  void layers_of(const int64_t* handles, std::size_t n, uint8_t* out) const {
    std::shared_lock lk(mu_);
    slots_.layers_of(handles, n, out);
  }
  /// True for handles that currently name a live row.
  void contains(const int64_t* handles, std::size_t n, uint8_t* out) const {
    std::shared_lock lk(mu_);
    slots_.contains(handles, n, out);
  }
  /// Copies of the columns up to the high-water mark.
  void columns(std::vector<uint64_t>& ns, std::vector<uint8_t>& layers,
               std::vector<uint8_t>& live) const {
    std::shared_lock lk(mu_);
    slots_.columns(ns, layers, live);
  }
  /// Live rows per namespace.
  std::size_t namespace_size(uint64_t ns) const {
    std::shared_lock lk(mu_);
    return slots_.namespace_size(ns);
  }

 protected:
  SlotTable slots_;
  mutable std::shared_mutex mu_;
};

}  // namespace lamina
