// kv_cache_binding.hpp — the methods the two KV-cache classes share (KVCache in
// bind_model.cpp, CudaKVCache in bind_model_cuda.cpp), defined once for either cache type.
// A cache type provides n_layers/n_kv_heads/head_dim/n_seen/bytes, length, positions, keep,
// truncate, clear, reserve, scaled, ratio_index and outlier_share (lamina/model.hpp and
// cuda/model.hpp); the host copies of keys/values and clone() differ and come in as
// callables.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

namespace lamina::py_detail {

/// A per-(layer, head) table of the Ms-PoE assignment, `v` row-major, as a new
/// [n_layers, v.size() / n_layers] array of T.
template <class T, class V>
py::array_t<T> per_layer_table(const std::vector<V>& v, int n_layers) {
  const std::size_t rows = static_cast<std::size_t>(n_layers);
  py::array_t<T> out({rows, v.size() / rows});
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

/// The docstrings that differ between the two caches.
struct KVCacheDocs {
  const char* keys;
  const char* values;
  const char* keep;
};

/// Defines the shared methods on `cls`. `rows(cache, layer, head, keys)` returns the host copy
/// of a head's keys (keys = true) or values, float32 [n, head_dim]; `clone(cache)` the copy
/// (called with the GIL released).
template <class Cache, class Rows, class Clone>
void def_kv_cache(py::class_<Cache>& cls, const KVCacheDocs& docs, Rows rows, Clone clone) {
  cls.def_property_readonly("n_layers", &Cache::n_layers)
      .def_property_readonly("n_kv_heads", &Cache::n_kv_heads)
      .def_property_readonly("head_dim", &Cache::head_dim)
      .def_property_readonly("n_seen", &Cache::n_seen)
      .def("lengths",
           [](const Cache& c) {
             py::array_t<int64_t> out({c.n_layers(), c.n_kv_heads()});
             int64_t* o = out.mutable_data();
             for (int l = 0; l < c.n_layers(); ++l)
               for (int h = 0; h < c.n_kv_heads(); ++h)
                 o[l * c.n_kv_heads() + h] = static_cast<int64_t>(c.length(l, h));
             return out;
           },
           "Entries held per (layer, KV head): int64 [n_layers, n_kv_heads].")
      .def("keys", [rows](const Cache& c, int l, int h) { return rows(c, l, h, true); },
           py::arg("layer"), py::arg("head"), docs.keys)
      .def("values", [rows](const Cache& c, int l, int h) { return rows(c, l, h, false); },
           py::arg("layer"), py::arg("head"), docs.values)
      .def("positions",
           [](const Cache& c, int l, int h) {
             const std::size_t n = c.length(l, h);
             py::array_t<int64_t> out(n);
             for (std::size_t i = 0; i < n; ++i) out.mutable_data()[i] = c.positions(l, h)[i];
             return out;
           },
           py::arg("layer"), py::arg("head"),
           "Token positions of the entries of (layer, KV head): int64 [n].")
      .def("keep",
           [](Cache& c, int l, int h, const py::object& idx) {
             py::array a = checked_array<int64_t>(idx, "indices", 1, "int64");
             const int64_t* p = static_cast<const int64_t*>(a.data());
             const std::size_t n = static_cast<std::size_t>(a.shape(0));
             py::gil_scoped_release nogil;
             c.keep(l, h, p, n);
           },
           py::arg("layer"), py::arg("head"), py::arg("indices"), docs.keep)
      .def(
          "truncate", [](Cache& c, std::int64_t n) { c.truncate(n); }, py::arg("n_tokens"),
          "Roll back to the first `n_tokens` tokens: drop every entry at position >= n_tokens "
          "and set n_seen to n_tokens (no recompute, storage kept; 0 <= n_tokens <= n_seen, "
          "else ValueError).")
      .def(
          "clear",
          [](Cache& c) {
            py::gil_scoped_release nogil;
            c.clear();
          },
          "Drop every entry and free the storage (and any Ms-PoE ratio assignment).")
      .def(
          "ratio_index",
          [](const Cache& c) -> py::object {
            if (!c.scaled()) return py::none();
            return per_layer_table<int32_t>(c.ratio_index(), c.n_layers());
          },
          "Ms-PoE ratio index per (layer, KV head), int32 [n_layers, n_kv_heads] (-1: the layer "
          "keeps plain RoPE), or None when the cache was not filled by a scaled model.")
      .def(
          "outlier_share",
          [](const Cache& c) -> py::object {
            if (!c.scaled()) return py::none();
            return per_layer_table<float>(c.outlier_share(), c.n_layers());
          },
          "The outlier share of every (layer, query head) the Ms-PoE ratios were assigned from, "
          "float32 [n_layers, n_heads] (0 where not rescaled), or None.")
      .def(
          "clone",
          [clone](const Cache& c) {
            py::gil_scoped_release nogil;
            return clone(c);
          },
          "An independent copy of the cache (entries, positions and seen-token count) with the "
          "same allocation (nbytes equal).")
      .def(
          "reserve",
          [](Cache& c, std::int64_t n) {
            if (n < 0) throw py::value_error("reserve: entries must be >= 0, got " + std::to_string(n));
            py::gil_scoped_release nogil;
            c.reserve(static_cast<std::size_t>(n));
          },
          py::arg("entries"),
          "Allocate room for `entries` entries on every (layer, KV head) holding less (never "
          "shrinks): a cache kept at a fixed budget reserves it once and stops reallocating.");
}

}  // namespace lamina::py_detail
