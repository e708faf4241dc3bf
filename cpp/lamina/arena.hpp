// lamina/arena.hpp — a contiguous, growable arena of fixed-dimension vectors.
//
// Layout: one 64-byte-aligned block; row r starts at r * stride elements, stride = dim rounded
// up to a multiple of 64 bytes (padding is zero). Columns beside the block: namespace (uint64),
// layer (uint8), live (uint8), squared norm (float), generation (uint32).
//
// Handles ("slots"): add() returns int64 handles = (generation << 32) | row. A fresh row has
// generation 0, so until a row is reused a handle equals its row index. remove() bumps the
// row's generation, so a handle kept after removal is stale and is refused (IndexError) even
// after the row is reused: a handle never silently points at other data. Growth copies the
// block; rows and handles stay valid.
//
// Codes: with a codec (lamina/codec.hpp) each row also has a compact code, written on add and
// cleared on remove; search(oversample = r > 0) scans the codes for the best k * r rows per
// query and re-scores those exactly from the float rows (oversample = 0: the exact scan).
//
// Thread safety: any number of concurrent readers (search, get, stats) or one writer (add,
// remove, set_layer, reserve) at a time, enforced by an internal reader/writer lock. Readers
// never block each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "lamina/codec.hpp"
#include "lamina/slot_table.hpp"
#include "lamina/topk.hpp"

namespace lamina {

enum class DType : int { F32 = 0, F16 = 1 };

/// Elements between rows: dim rounded up to a multiple of 64 bytes (ValueError unless
/// 1 <= dim <= 2^20). Both arenas lay their rows out so.
std::size_t arena_row_stride(std::size_t dim, DType dtype);
/// ValueError naming the first row of `rows` (n x dim of dtype, host memory) with a NaN or Inf.
void check_finite_rows(const void* rows, std::size_t n, std::size_t dim, DType dtype);

/// A snapshot of the row block: keeps the storage alive while a view of it exists.
struct ArenaView {
  std::shared_ptr<void> storage;
  std::size_t rows = 0;    // rows in use (live and dead), the high-water mark
  std::size_t dim = 0;
  std::size_t stride = 0;  // elements between rows
  DType dtype = DType::F32;
};

class VectorArena : public ArenaSlots {
 public:
  /// dim >= 1; capacity: initial rows reserved (grows by doubling); codec: the rows' codes.
  VectorArena(std::size_t dim, DType dtype, std::size_t capacity, Codec codec = Codec::None);
  Codec codec() const { return codec_; }
  std::size_t code_stride() const { return code_stride_; }

  std::size_t dim() const { return dim_; }
  DType dtype() const { return dtype_; }
  std::size_t stride() const { return stride_; }

  /// Append n rows (n x dim, C-contiguous, element type per dtype(): float or binary16 bits).
  /// ns/layers: one value (ns_per_row/layers_per_row = false) or n values. Rows must be
  /// finite (ValueError otherwise, nothing added). Writes n handles to out.
  void add(const void* vectors, std::size_t n, const uint64_t* ns, bool ns_per_row,
           const uint8_t* layers, bool layers_per_row, int64_t* out);

  /// Remove rows by handle. All handles are validated first (IndexError for stale or
  /// out-of-range handles, ValueError for duplicates): either all are removed or none.
  void remove(const int64_t* handles, std::size_t n);

  /// Copy rows to out (n x dim of dtype(), contiguous).
  void get(const int64_t* handles, std::size_t n, void* out) const;
  /// Move rows to another layer.
  void set_layer(const int64_t* handles, std::size_t n, uint8_t layer);

  /// Exact top-k (see topk.hpp for ordering, ties and padding). Filters:
  ///  - ns == nullptr: all namespaces; n_ns == 1: one namespace for all queries;
  ///    n_ns == nq: query i searches only namespace ns[i] (one agent per query);
  ///  - layer_mask: 256-bit mask of allowed layers (null: all);
  ///  - allow: a mask over rows (a handle's low 32 bits), allow_len bytes (null: every row);
  ///    row r is a candidate only if r < allow_len and allow[r] != 0. Rows outside the mask are
  ///    never scored, so a search returns min(k, admitted live rows) results (a metadata filter
  ///    pushed into the search: no post-filter starves k).
  /// Output ids are handles; -1 pads. Throws ValueError on an empty arena.
  /// oversample > 0 (an arena with a codec): the code scan keeps k * oversample candidates per
  /// query, re-scored exactly; scores are exact, the set may miss rows the codes ranked low.
  void search(const float* queries, std::size_t nq, std::size_t k, Metric metric,
              const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask, int n_threads,
              float* out_scores, int64_t* out_ids, std::size_t oversample = 0,
              const uint8_t* allow = nullptr, std::size_t allow_len = 0) const;

  void reserve(std::size_t capacity);

  /// Snapshot of the block (shared ownership) and copies of the columns.
  ArenaView view() const;

 private:
  std::size_t elt() const { return dtype_ == DType::F16 ? 2 : 4; }
  void grow_locked(std::size_t min_capacity);
  RowStore row_store() const;
  void search_locked(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                     const RowFilter& filter, int n_threads, float* out_scores,
                     int64_t* out_ids, std::size_t oversample) const;
  void rerank_locked(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                     const int64_t* cand_rows, std::size_t m, int n_threads, float* out_scores,
                     int64_t* out_ids) const;

  std::size_t dim_;
  DType dtype_;
  std::size_t stride_;
  std::shared_ptr<void> storage_;
  std::vector<float> sqnorm_;
  Codec codec_ = Codec::None;
  std::size_t code_stride_ = 0;  // bytes per row's code
  std::vector<uint8_t> codes_;
  std::vector<float> code_factor_;
  std::vector<int32_t> code_count_;
};

}  // namespace lamina
