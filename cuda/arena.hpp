// cuda/arena.hpp — a VectorArena whose rows and columns live in device memory.
//
// Same model as lamina/arena.hpp (rows padded to a 64-byte stride, namespace / layer / live /
// squared-norm / generation columns, handles (generation << 32) | row, stale handles refused,
// removed rows zeroed and reused LIFO), with the columns in device memory and a host mirror of
// the bookkeeping columns (namespace, layer, live, generation, free list, rows per namespace).
// The mirror is what lets add / remove / set_layer run without reading the device: only the
// returned handles (computed on the host) and search results cross back.
//
// Streams: every method takes the caller's stream. The arena runs its device work on its own
// stream, ordered after the work already queued on the caller's stream, and makes the caller's
// stream wait for it, so calls from several streams are serialised correctly.
// Synchronisation: add() with device input synchronises once (finiteness check), get() and
// search() synchronise once (results / NaN check); remove() and set_layer() do not.
//
// Namespace search: a CSR of rows sorted by (namespace, layer) (two stable device radix sorts)
// is rebuilt lazily on the first namespace-filtered search after a change (O(rows) on the
// device), then one launch answers b queries, each restricted to its own namespace; the fleet
// step (search_view) scans one (namespace, layer) range per query and layer.
//
// Codes: with a codec (lamina/codec.hpp) each row also has its code in device memory, encoded
// on the host at add() (device input is copied to the host for it) and cleared on remove();
// search(oversample = r > 0) scans the codes for k * r candidates per query (codec.hpp)
// and re-scores them exactly from the float rows.
//
// Thread safety: like VectorArena (shared reader lock for reads, exclusive for writes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lamina/arena.hpp"
#include "lamina/codec.hpp"
#include "lamina/slot_table.hpp"
#include "lamina/topk.hpp"
#include "codec.hpp"
#include "topk.hpp"

namespace lamina::cuda {

class CudaVectorArena : public ArenaSlots {
 public:
  /// dim >= 1; capacity: initial rows (grows by doubling); device: CUDA ordinal; codec: the
  /// rows' codes (Codec::None: none).
  CudaVectorArena(std::size_t dim, DType dtype, std::size_t capacity, int device,
                  Codec codec = Codec::None);
  Codec codec() const { return codec_; }
  std::size_t code_stride() const { return code_stride_; }
  ~CudaVectorArena();
  CudaVectorArena(const CudaVectorArena&) = delete;
  CudaVectorArena& operator=(const CudaVectorArena&) = delete;

  std::size_t dim() const { return dim_; }
  DType dtype() const { return dtype_; }
  std::size_t stride() const { return stride_; }
  int device() const { return device_; }

  /// Append n rows (n x dim, C-contiguous, dtype()): `vectors` is device memory of this device
  /// when `on_device`, else host memory. ns / layers: one value or n values (host). Rows must be
  /// finite (ValueError, nothing added). Writes n handles to `out` (host).
  void add(const void* vectors, bool on_device, std::size_t n, const uint64_t* ns,
           bool ns_per_row, const uint8_t* layers, bool layers_per_row, int64_t* out,
           void* stream);
  /// Grow the block to hold at least `capacity` rows.
  void reserve(std::size_t capacity);
  /// All-or-nothing removal (IndexError for stale / out-of-range, ValueError for duplicates).
  void remove(const int64_t* handles, std::size_t n, void* stream);
  /// Copy rows to host memory `out` (n x dim of dtype()).
  void get(const int64_t* handles, std::size_t n, void* out, void* stream) const;
  void set_layer(const int64_t* handles, std::size_t n, uint8_t layer, void* stream);

  /// Exact top-k; queries (nq x dim float32) and outputs (nq x k) are device memory of this
  /// device. Filters as VectorArena::search (ns, n_ns and layer_mask are host memory).
  /// oversample > 0 (an arena with a codec): the code scan keeps k * oversample candidates.
  void search(const float* queries, std::size_t nq, std::size_t k, Metric metric,
              const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask,
              float* out_scores, int64_t* out_ids, void* stream,
              std::size_t oversample = 0) const;

  /// As search(), with queries and outputs in host memory (uploads the queries, downloads the
  /// results).
  void search_host(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                   const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask,
                   float* out_scores, int64_t* out_ids, std::size_t oversample = 0) const;

  /// What a fused fleet step (fleet.hpp) needs to search this arena with its own
  /// (captured) launches: the rows, the device columns and the namespace CSR. Valid while the
  /// reader lock of read_lock() is held; the CSR and the columns are written on stream(), so
  /// the consumer's stream must wait for it first.
  struct SearchView {
    DeviceRows rows;
    const uint8_t* live = nullptr;
    const uint8_t* layers = nullptr;
    const uint32_t* generations = nullptr;
    const uint32_t* csr = nullptr;  // rows sorted by (namespace, layer), high_water entries
    DeviceCodes codes;              // codec None without codes
    std::size_t high_water = 0;
    std::size_t live_count = 0;
  };
  /// The reader lock (searches may share it; add / remove / set_layer / reserve wait for it).
  std::shared_lock<std::shared_mutex> read_lock() const { return std::shared_lock(mu_); }
  /// Under read_lock(): rebuild the CSR if it is stale (on stream(); may allocate and
  /// synchronise, so never while a stream is being captured), write for each of the L layers
  /// and nq namespaces (host) the CSR range of the rows with that namespace and layer to
  /// seg[2 (l nq + q)], seg[2 (l nq + q) + 1] (host), and the longest range to *longest.
  SearchView search_view(const uint64_t* ns, std::size_t nq, const uint8_t* layers,
                         std::size_t L, int64_t* seg, std::size_t* longest) const;

  /// The arena's own stream (cudaStream_t): consumers of device_rows() order after it.
  void* stream() const { return stream_; }

  /// Device pointer to the row block (valid until the next growth) and the rows in use.
  const void* device_rows() const { return rows_; }

 private:
  std::size_t elt() const { return dtype_ == DType::F16 ? 2 : 4; }
  DeviceRows device_rows_locked() const;
  DeviceCodes device_codes_locked() const;
  void grow_locked(std::size_t min_capacity);
  void ensure_csr_locked() const;  // on stream_, under csr_mu_
  void write_codes_locked(const void* host_rows, const std::vector<uint32_t>& rows);
  // search() with, when the caller has them, the queries in host memory too (the code scan
  // encodes them on the host: no copy back)
  void search_impl(const float* queries, const float* host_queries, std::size_t nq, std::size_t k,
                   Metric metric, const uint64_t* ns, std::size_t n_ns,
                   const uint64_t* layer_mask, float* out_scores, int64_t* out_ids, void* stream,
                   std::size_t oversample) const;
  void search_codes_locked(const float* queries, std::size_t nq, std::size_t k,
                           const float* host_queries, Metric metric, const DeviceFilter& f,
                           std::size_t oversample, float* out_scores, int64_t* out_ids) const;

  std::size_t dim_;
  DType dtype_;
  std::size_t stride_;
  int device_;
  void* stream_ = nullptr;  // cudaStream_t owned by the arena
  // device columns
  void* rows_ = nullptr;
  uint64_t* d_ns_ = nullptr;
  uint8_t* d_layer_ = nullptr;
  uint8_t* d_live_ = nullptr;
  float* d_sqnorm_ = nullptr;
  uint32_t* d_gen_ = nullptr;
  Codec codec_ = Codec::None;
  std::size_t code_stride_ = 0;  // bytes per row's code
  uint8_t* d_codes_ = nullptr;
  float* d_cfactor_ = nullptr;
  int32_t* d_ccount_ = nullptr;
  struct NsLayerHash {
    std::size_t operator()(const std::pair<uint64_t, uint8_t>& k) const {
      return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  // live rows per (namespace, layer): the CSR's sub-ranges, known without reading the device
  std::unordered_map<std::pair<uint64_t, uint8_t>, std::size_t, NsLayerHash> nl_count_;
  void count_ns_layer(uint64_t ns, uint8_t layer, bool add);
  // namespace CSR (lazy)
  mutable std::mutex csr_mu_;
  mutable bool csr_dirty_ = true;
  mutable uint32_t* d_csr_ = nullptr;
  mutable std::size_t csr_cap_ = 0;
  mutable std::unordered_map<uint64_t, std::pair<std::size_t, std::size_t>> csr_off_;
  mutable std::unordered_map<std::pair<uint64_t, uint8_t>, std::pair<std::size_t, std::size_t>,
                             NsLayerHash>
      csr_nl_off_;
};

}  // namespace lamina::cuda
