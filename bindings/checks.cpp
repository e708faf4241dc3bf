#include "checks.hpp"

#include <cmath>

namespace lamina::py_detail {

// ---- shapes -----------------------------------------------------------------------------
std::string shape_str(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

void check_shape(const char* name, const std::vector<py::ssize_t>& have,
                 const std::vector<py::ssize_t>& want) {
  LAMINA_CHECK(have == want, name, " has shape ", shape_str(have), ", expected ", shape_str(want));
}

void check_length(const char* name, std::size_t have, std::size_t n, const char* per) {
  LAMINA_CHECK(have == n, name, " has ", have, " elements, expected ", n, " (", per, ")");
}

void check_columns(const char* name, py::ssize_t rows, py::ssize_t cols, std::size_t dim,
                   const char* whose) {
  LAMINA_CHECK(static_cast<std::size_t>(cols) == dim, name, " must have ", dim, " columns (",
               whose, "), got shape (", rows, ", ", cols, ")");
}

// ---- search and arenas ---------------------------------------------------------------------
void check_k(long long k) { LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k); }

DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f4" || s == "<f4") return DType::F32;
  if (s == "float16" || s == "f2" || s == "<f2") return DType::F16;
  throw ValueError("unsupported arena dtype '" + s + "'; expected 'float32' or 'float16'");
}

ArenaArgs arena_args(long long dim, const std::string& dtype, long long capacity,
                     const py::object& codec) {
  LAMINA_CHECK(dim >= 1, "dim must be >= 1, got ", dim);
  LAMINA_CHECK(capacity >= 0, "capacity must be >= 0, got ", capacity);
  Codec c = Codec::None;
  if (!codec.is_none()) {
    if (!py::isinstance<py::str>(codec)) throw TypeError("codec must be 'binary', 'int8' or None");
    c = parse_codec(codec.cast<std::string>());
  }
  return {static_cast<std::size_t>(dim), parse_dtype(dtype), static_cast<std::size_t>(capacity),
          c};
}

void layer_mask_from(const py::handle& layers, uint64_t mask[4]) {
  mask[0] = mask[1] = mask[2] = mask[3] = 0;
  for (auto item : layers) {
    if (!py::isinstance<py::int_>(item))
      throw TypeError("layers must be a sequence of ints in [0, 255]");
    const long long l = item.cast<long long>();
    LAMINA_CHECK(l >= 0 && l <= 255, "layer values must be in [0, 255], got ", l);
    mask[l >> 6] |= 1ull << (l & 63);
  }
}

py::array check_host_queries(const py::handle& obj, std::size_t dim, const char* whose) {
  py::array q = checked_array<float>(obj, "queries", 2, "float32");
  check_columns("queries", q.shape(0), q.shape(1), dim, whose);
  const float* p = static_cast<const float*>(q.data());
  const std::size_t n = static_cast<std::size_t>(q.size());
  for (std::size_t i = 0; i < n; ++i)
    LAMINA_CHECK(std::isfinite(p[i]), "queries[", i / dim,
                 "] contains NaN or Inf; pass finite queries");
  return q;
}

py::array check_host_vectors(const py::handle& obj, DType dtype, std::size_t dim) {
  py::array v;
  if (dtype == DType::F16) {
    if (!py::isinstance<py::array>(obj))
      throw TypeError("vectors must be a numpy.ndarray of dtype float16 for a float16 arena");
    v = py::reinterpret_borrow<py::array>(obj);
    if (!(v.dtype().kind() == 'f' && v.dtype().itemsize() == 2))
      throw TypeError("vectors must have dtype float16 for a float16 arena, got " +
                      dtype_str(v.dtype()) +
                      "; convert explicitly with vectors.astype(numpy.float16)");
    LAMINA_CHECK(v.ndim() == 2, "vectors must be 2-dimensional (n x dim), got ndim=", v.ndim());
    LAMINA_CHECK(v.flags() & py::array::c_style,
                 "vectors must be C-contiguous; pass numpy.ascontiguousarray(vectors)");
  } else {
    v = checked_array<float>(obj, "vectors", 2, "float32");
  }
  LAMINA_CHECK(static_cast<std::size_t>(v.shape(1)) == dim, "vectors must have ", dim,
               " columns (the arena's dim), got shape (", v.shape(0), ", ", v.shape(1), ")");
  return v;
}

QueryNamespaces query_namespaces(const py::object& ns, std::size_t nq) {
  QueryNamespaces r;
  if (ns.is_none()) return r;
  if (py::isinstance<py::int_>(ns)) {
    py::int_ i = ns;
    LAMINA_CHECK(py::int_(0) <= i, "namespace must be in [0, 2^64)");
    r.scalar = i.cast<uint64_t>();
    r.n = 1;
    return r;
  }
  r.arr = checked_array<uint64_t>(ns, "namespace", 1, "uint64");
  r.is_array = true;
  LAMINA_CHECK(static_cast<std::size_t>(r.arr.shape(0)) == nq,
               "namespace must be one value or one per query (", nq, "), got ", r.arr.shape(0));
  r.n = nq;
  return r;
}

void check_layer(long long layer) {
  LAMINA_CHECK(layer >= 0 && layer <= 255, "layer must be in [0, 255], got ", layer);
}

RowLabels row_labels(const py::object& ns, const py::object& layer, std::size_t n) {
  RowLabels r;
  if (py::isinstance<py::int_>(ns)) {
    py::int_ i = ns;
    LAMINA_CHECK(py::int_(0) <= i &&
                     i < py::int_(py::module_::import("builtins").attr("pow")(2, 64)),
                 "namespace must be in [0, 2^64)");
    r.ns_scalar = i.cast<uint64_t>();
  } else {
    r.ns_arr = checked_array<uint64_t>(ns, "namespace", 1, "uint64");
    r.ns_rows = true;
    LAMINA_CHECK(static_cast<std::size_t>(r.ns_arr.shape(0)) == n,
                 "namespace must be one value or one per row (", n, "), got ", r.ns_arr.shape(0));
  }
  if (py::isinstance<py::int_>(layer)) {
    const long long l = layer.cast<long long>();
    check_layer(l);
    r.layer_scalar = static_cast<uint8_t>(l);
  } else {
    r.layer_arr = checked_array<uint8_t>(layer, "layer", 1, "uint8");
    r.layer_rows = true;
    LAMINA_CHECK(static_cast<std::size_t>(r.layer_arr.shape(0)) == n,
                 "layer must be one value or one per row (", n, "), got ", r.layer_arr.shape(0));
  }
  return r;
}

// ---- memory kernels -----------------------------------------------------------------------
void check_targets(std::size_t d, const std::vector<py::ssize_t>& targets_shape) {
  LAMINA_CHECK(static_cast<std::size_t>(targets_shape[1]) == d, "targets has shape ",
               shape_str(targets_shape), " but rows has ", d,
               " columns; targets must be (m, d) with the same d");
}

void check_index(long long index_len, std::size_t m, std::size_t n) {
  if (index_len >= 0)
    LAMINA_CHECK(static_cast<std::size_t>(index_len) == m, "index has ", index_len,
                 " entries but targets has ", m, " rows; targets holds one row per index entry");
  else
    LAMINA_CHECK(m == n, "targets has ", m, " rows but rows has ", n,
                 "; without index they must match (or pass index= to update a subset)");
}

void check_evict_namespaces(std::size_t have, std::size_t n) {
  LAMINA_CHECK(have == n, "namespaces has ", have, " elements but scores has ", n,
               "; pass one namespace per row");
}

void check_capacity(std::size_t keys, std::size_t values) {
  LAMINA_CHECK(keys == values, "capacity keys and values differ in length");
}

// ---- KV selection -------------------------------------------------------------------------
kv::Pool parse_pool(const std::string& s) {
  if (s == "none") return kv::Pool::None;
  if (s == "max") return kv::Pool::Max;
  if (s == "avg") return kv::Pool::Avg;
  throw ValueError("pooling must be 'max', 'avg' or 'none', got '" + s + "'");
}

kv::Reduce parse_reduce(const std::string& s, const char* what) {
  if (s == "mean") return kv::Reduce::Mean;
  if (s == "max") return kv::Reduce::Max;
  if (s == "sum") return kv::Reduce::Sum;
  throw ValueError(std::string(what) + " must be 'mean', 'max' or 'sum', got '" + s + "'");
}

kv::ScoreSpec score_spec(const std::vector<std::size_t>& shape, long long kv_heads,
                         long long n_candidates, const std::string& window_reduce,
                         bool causal_normalize, const std::string& pool, long long kernel,
                         const std::string& group_reduce) {
  const bool win = shape.size() == 4;
  kv::ScoreSpec sp;
  sp.layers = shape[0];
  sp.heads = shape[1];
  sp.window = win ? shape[2] : 0;
  sp.seq_len = shape.back();
  LAMINA_CHECK(kv_heads >= 1, "n_kv_heads must be >= 1, got ", kv_heads);
  sp.kv_heads = static_cast<std::size_t>(kv_heads);
  LAMINA_CHECK(n_candidates >= 0 && static_cast<std::size_t>(n_candidates) <= sp.seq_len,
               "n_candidates must be in [0, ", sp.seq_len, "], got ", n_candidates);
  sp.n_candidates = static_cast<std::size_t>(n_candidates);
  sp.window_reduce = parse_reduce(window_reduce, "window_reduce");
  sp.causal_normalize = causal_normalize;
  sp.pool = parse_pool(pool);
  LAMINA_CHECK(kernel >= 1, "kernel_size must be >= 1, got ", kernel);
  sp.kernel = static_cast<std::size_t>(kernel);
  sp.group_reduce = parse_reduce(group_reduce, "gqa reduction");
  LAMINA_CHECK(sp.layers >= 1 && sp.heads >= 1 && sp.seq_len >= 1,
               "scores must be non-empty, got a zero-length axis");
  LAMINA_CHECK(!win || sp.window >= 1, "window attention needs at least one row");
  LAMINA_CHECK(sp.seq_len < (std::size_t{1} << 31), "sequences longer than 2^31 are not supported");
  LAMINA_CHECK(sp.heads % sp.kv_heads == 0, "the number of query heads (", sp.heads,
               ") must be a multiple of n_kv_heads (", sp.kv_heads, ")");
  return sp;
}

void check_value_norms(const std::vector<py::ssize_t>& s, const kv::ScoreSpec& sp) {
  auto at = [&](std::size_t i) { return static_cast<std::size_t>(s[i]); };
  if (s.size() == 2)
    LAMINA_CHECK(at(0) == sp.layers && at(1) == sp.kv_heads,
                 "per-head value_norms must have shape (", sp.layers, ", ", sp.kv_heads,
                 "), got (", s[0], ", ", s[1], ")");
  else
    LAMINA_CHECK(at(0) == sp.layers && at(1) == sp.kv_heads && at(2) == sp.seq_len,
                 "per-token value_norms must have shape (", sp.layers, ", ", sp.kv_heads, ", ",
                 sp.seq_len, "), got (", s[0], ", ", s[1], ", ", s[2], ")");
}

void check_per_layer(const char* name, std::size_t have, std::size_t L) {
  LAMINA_CHECK(have == L, name, " must have one entry per layer (", L, ")");
}

void check_select_rows(long long n, long long tail) {
  LAMINA_CHECK(n >= 0 && tail >= 0, "n and tail must be >= 0");
}

void check_select_scores(const std::vector<py::ssize_t>& s, std::size_t L, std::size_t Hkv,
                         long long n) {
  LAMINA_CHECK(static_cast<std::size_t>(s[0]) == L && static_cast<std::size_t>(s[1]) == Hkv &&
                   s[2] == n,
               "scores must have shape (", L, ", ", Hkv, ", ", n, ")");
}

void kv_offsets(const int64_t* k, std::size_t R, std::size_t H, long long n, long long tail,
                int64_t* offsets) {
  offsets[0] = 0;
  for (std::size_t r = 0; r < R; ++r) {
    LAMINA_CHECK(k[r] >= 0 && k[r] <= n, "k[", r / H, ", ", r % H, "] = ", k[r],
                 " is outside [0, ", n, "]");
    offsets[r + 1] = offsets[r] + k[r] + tail;
  }
}

void check_offsets_count(std::size_t n_offsets, std::size_t R) {
  LAMINA_CHECK(n_offsets == R + 1, "offsets must have L*H_kv+1 = ", R + 1, " entries");
}

void check_offsets_span(const int64_t* offsets, std::size_t R, std::size_t n_indices) {
  LAMINA_CHECK(offsets[0] == 0 && offsets[R] == static_cast<int64_t>(n_indices),
               "offsets must start at 0 and end at len(indices)");
}

void check_head_dim(std::size_t D) {
  LAMINA_CHECK(D >= 1, "values must have a non-empty last axis (head_dim)");
}

}  // namespace lamina::py_detail
