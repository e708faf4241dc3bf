// bindings/checks.hpp — the argument checks shared by the host bindings (numpy arrays:
// bind_search.cpp, bind_kernels.cpp, bind_kv.cpp) and the device bindings
// (__cuda_array_interface__: bind_cuda.cpp). One function per rule; the rules on extents take
// sizes, not arrays, so a host call and a device call with the same mistake raise the same
// exception type (ValueError / TypeError / IndexError) with the same message. The dtype and
// layout checks of the arrays themselves are checked_array (common.hpp) and
// checked_cuda_array (cuda_array.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"
#include "lamina/arena.hpp"
#include "lamina/kv.hpp"

namespace lamina::py_detail {

// ---- shapes -----------------------------------------------------------------------------
/// "(2, 3)" / "(4,)".
std::string shape_str(const std::vector<py::ssize_t>& shape);
/// `name` has exactly `want` (same ndim assumed): "<name> has shape (..), expected (..)".
void check_shape(const char* name, const std::vector<py::ssize_t>& have,
                 const std::vector<py::ssize_t>& want);
/// "<name> has <have> elements, expected <n> (<per>)".
void check_length(const char* name, std::size_t have, std::size_t n, const char* per);
/// Rows of `dim` columns: "<name> must have <dim> columns (<whose>), got shape (r, c)".
void check_columns(const char* name, py::ssize_t rows, py::ssize_t cols, std::size_t dim,
                   const char* whose);

// ---- search and arenas ---------------------------------------------------------------------
void check_k(long long k);
/// Arena dtype by name ("float32"/"f4"/"<f4", "float16"/...).
DType parse_dtype(const std::string& s);
/// An arena constructor's arguments, checked (dim >= 1, capacity >= 0, dtype by name, codec
/// None or 'binary' / 'int8').
struct ArenaArgs {
  std::size_t dim;
  DType dtype;
  std::size_t capacity;
  Codec codec;
};
ArenaArgs arena_args(long long dim, const std::string& dtype, long long capacity,
                     const py::object& codec);
/// A sequence of layer numbers as a 256-bit mask.
void layer_mask_from(const py::handle& layers, uint64_t mask[4]);
/// Host queries: float32 (n, dim), C-contiguous, finite; `whose` names dim in messages.
py::array check_host_queries(const py::handle& obj, std::size_t dim, const char* whose);
/// Host vectors for an arena of `dtype` and `dim`: exact dtype, 2-D, C-contiguous.
py::array check_host_vectors(const py::handle& obj, DType dtype, std::size_t dim);
/// The namespace argument of search: None (ptr null), an int or one uint64 per query.
struct QueryNamespaces {
  uint64_t scalar = 0;
  py::array arr;      // one per query (when n > 1 or is_array)
  bool is_array = false;
  std::size_t n = 0;  // 0 (none), 1 or the number of queries
  const uint64_t* ptr() const {
    return is_array ? static_cast<const uint64_t*>(arr.data()) : n == 0 ? nullptr : &scalar;
  }
};
QueryNamespaces query_namespaces(const py::object& ns, std::size_t nq);
/// The namespace and layer arguments of add: one value or one per row.
struct RowLabels {
  uint64_t ns_scalar = 0;
  uint8_t layer_scalar = 0;
  py::array ns_arr, layer_arr;
  bool ns_rows = false, layer_rows = false;  // one per row (in ns_arr / layer_arr)
  const uint64_t* ns() const {
    return ns_rows ? static_cast<const uint64_t*>(ns_arr.data()) : &ns_scalar;
  }
  const uint8_t* layer() const {
    return layer_rows ? static_cast<const uint8_t*>(layer_arr.data()) : &layer_scalar;
  }
};
RowLabels row_labels(const py::object& ns, const py::object& layer, std::size_t n);
void check_layer(long long layer);

// ---- memory kernels -----------------------------------------------------------------------
/// ema_blend / damped_update: targets (m, d) for rows (n, d); then the index (`index_len`
/// entries, or -1: no index, and then m must equal n).
void check_targets(std::size_t d, const std::vector<py::ssize_t>& targets_shape);
void check_index(long long index_len, std::size_t m, std::size_t n);
/// evict_to_capacity's namespaces (one per score) and capacity table.
void check_evict_namespaces(std::size_t have, std::size_t n);
void check_capacity(std::size_t keys, std::size_t values);

// ---- KV selection -------------------------------------------------------------------------
kv::Pool parse_pool(const std::string& s);
kv::Reduce parse_reduce(const std::string& s, const char* what);
/// The scoring spec of scores with extents `shape` ((L, H, S) or (L, H, w, S)).
kv::ScoreSpec score_spec(const std::vector<std::size_t>& shape, long long kv_heads,
                         long long n_candidates, const std::string& window_reduce,
                         bool causal_normalize, const std::string& pool, long long kernel,
                         const std::string& group_reduce);
/// value_norms per head (L, H_kv) or per token (L, H_kv, S) for `sp`.
void check_value_norms(const std::vector<py::ssize_t>& shape, const kv::ScoreSpec& sp);
/// "<name> must have one entry per layer (L)".
void check_per_layer(const char* name, std::size_t have, std::size_t L);
/// select_rows: n, tail >= 0; scores (L, H_kv, n) when given.
void check_select_rows(long long n, long long tail);
void check_select_scores(const std::vector<py::ssize_t>& shape, std::size_t L, std::size_t Hkv,
                         long long n);
/// offsets[r + 1] = offsets[r] + k[r] + tail (R + 1 entries), with each k[r] checked against
/// [0, n]; k is (L, H) row-major (H names its entries in messages).
void kv_offsets(const int64_t* k, std::size_t R, std::size_t H, long long n, long long tail,
                int64_t* offsets);
/// gather: offsets has R + 1 entries, from 0 to len(indices).
void check_offsets_count(std::size_t n_offsets, std::size_t R);
void check_offsets_span(const int64_t* offsets, std::size_t R, std::size_t n_indices);
/// l1_norms: a non-empty last axis.
void check_head_dim(std::size_t D);

}  // namespace lamina::py_detail
