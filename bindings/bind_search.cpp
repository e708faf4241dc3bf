// Bindings for exact top-k search and the vector arena.
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "lamina/arena.hpp"
#include "lamina/codec.hpp"
#include "lamina/topk.hpp"
#include "optional_array.hpp"

namespace lamina::py_detail {

namespace {

bool is_f16(const py::array& a) { return a.dtype().kind() == 'f' && a.dtype().itemsize() == 2; }

std::pair<py::array_t<float>, py::array_t<int64_t>> alloc_out(std::size_t nq, std::size_t k) {
  return {py::array_t<float>({nq, k}), py::array_t<int64_t>({nq, k})};
}


// The rows of a plain float32 / float16 matrix, checked (2-D, C-contiguous, >= 1 column; with
// `need_rows`, >= 1 row); `keep` holds the array while the RowStore points into it.
RowStore matrix_rows(const py::object& vectors, bool need_rows, py::array& keep) {
  if (!py::isinstance<py::array>(vectors))
    throw TypeError("vectors must be a numpy.ndarray (float32 or float16)");
  keep = py::reinterpret_borrow<py::array>(vectors);
  const bool f16 = is_f16(keep);
  if (!f16) keep = checked_array<float>(vectors, "vectors", 2, "float32");
  LAMINA_CHECK(keep.ndim() == 2, "vectors must be 2-dimensional (n x dim), got ndim=", keep.ndim());
  LAMINA_CHECK(keep.flags() & py::array::c_style,
               "vectors must be C-contiguous; pass numpy.ascontiguousarray(vectors)");
  if (need_rows) LAMINA_CHECK(keep.shape(0) > 0, "vectors is empty (0 rows); nothing to search");
  LAMINA_CHECK(keep.shape(1) > 0, "vectors must have at least one column");
  RowStore rs;
  rs.base = keep.data();
  rs.stride = keep.shape(1);
  rs.dim = keep.shape(1);
  rs.f16 = f16;
  return rs;
}

void register_topk(py::module_& m) {
  m.def(
      "topk",
      [](const py::object& queries, const py::object& vectors, long long k,
         const std::string& metric, int threads) {
        check_k(k);
        const Metric met = parse_metric(metric);
        py::array v;
        const RowStore rs = matrix_rows(vectors, true, v);
        py::array q = check_host_queries(queries, rs.dim, "the vectors' dim");
        const std::size_t nq = q.shape(0), n = v.shape(0);
        auto [scores, ids] = alloc_out(nq, k);
        {
          float* so = scores.mutable_data();
          int64_t* io = ids.mutable_data();
          const float* qp = static_cast<const float*>(q.data());
          py::gil_scoped_release nogil;
          topk_search(qp, nq, rs, n, RowFilter{}, k, met, threads, so, io);
        }
        return py::make_tuple(scores, ids);
      },
      py::arg("queries"), py::arg("vectors"), py::arg("k"), py::arg("metric") = "ip",
      py::arg("threads") = 0);

  m.def(
      "inner_products",
      [](const py::object& queries, const py::object& vectors, const py::object& out,
         int threads) {
        py::array v;
        const RowStore rs = matrix_rows(vectors, false, v);
        py::array q = check_host_queries(queries, rs.dim, "the vectors' dim");
        const std::size_t nq = q.shape(0), n = v.shape(0);
        py::array res;
        if (out.is_none()) {
          res = py::array_t<float>({nq, n});
        } else {
          res = checked_array<float>(out, "out", 2, "float32");
          LAMINA_CHECK(res.shape(0) == (py::ssize_t)nq && res.shape(1) == (py::ssize_t)n,
                       "out must have shape (", nq, ", ", n, "), got (", res.shape(0), ", ",
                       res.shape(1), ")");
          LAMINA_CHECK(res.flags() & py::array::c_style, "out must be C-contiguous");
          LAMINA_CHECK(res.writeable(), "out must be writeable");
        }
        {
          float* o = static_cast<float*>(res.mutable_data());
          const float* qp = static_cast<const float*>(q.data());
          py::gil_scoped_release nogil;
          inner_products(qp, nq, rs, n, threads, o);
        }
        return res;
      },
      py::arg("queries"), py::arg("vectors"), py::arg("out") = py::none(),
      py::arg("threads") = 0);

  m.def(
      "codec_isa",
      [](const std::string& isa) {
        if (isa != "?") set_codec_isa(isa);
        return std::string(codec_isa());
      },
      py::arg("isa") = "?",
      "Testing aid: the ISA of the code-scan kernels; pass 'scalar'/'avx2'/'avx512' to force "
      "one, '' to restore the default.");
}

void register_arena(py::module_& m) {
  py::class_<VectorArena, std::shared_ptr<VectorArena>> arena_cls(m, "VectorArena");
  def_arena_common<VectorArena>(arena_cls);
  arena_cls
      .def(py::init([](long long dim, const std::string& dtype, long long capacity,
                       const py::object& codec) {
             const ArenaArgs a = arena_args(dim, dtype, capacity, codec);
             return std::make_shared<VectorArena>(a.dim, a.dtype, a.capacity, a.codec);
           }),
           py::arg("dim"), py::arg("dtype") = "float32", py::arg("capacity") = 1024,
           py::arg("codec") = py::none())
      .def(
          "add",
          [](VectorArena& A, const py::object& vectors, const py::object& ns,
             const py::object& layer) {
            py::array v = check_host_vectors(vectors, A.dtype(), A.dim());
            const std::size_t n = v.shape(0);
            const RowLabels lab = row_labels(ns, layer, n);
            py::array_t<int64_t> out(n);
            {
              const void* src = v.data();
              int64_t* o = out.mutable_data();
              py::gil_scoped_release nogil;
              A.add(src, n, lab.ns(), lab.ns_rows, lab.layer(), lab.layer_rows, o);
            }
            return out;
          },
          py::arg("vectors"), py::arg("namespace") = 0, py::arg("layer") = 0)
      .def("remove", [](VectorArena& A, const py::object& slots) { remove_slots(A, slots); })
      .def("get", [](const VectorArena& A, const py::object& slots) { return get_slots(A, slots); })
      .def("set_layer",
           [](VectorArena& A, const py::object& slots, long long layer) {
             check_layer(layer);
             py::array s = check_slots(slots);
             A.set_layer(static_cast<const int64_t*>(s.data()), s.shape(0),
                         static_cast<uint8_t>(layer));
           })
      .def(
          "search",
          [](const VectorArena& A, const py::object& queries, long long k,
             const std::string& metric, const py::object& ns, const py::object& layers,
             int threads, long long oversample, const py::object& allow) {
            check_k(k);
            LAMINA_CHECK(oversample >= 0, "oversample must be >= 0, got ", oversample);
            const Metric met = parse_metric(metric);
            py::array q = check_host_queries(queries, A.dim(), "the vectors' dim");
            const std::size_t nq = q.shape(0);
            const QueryNamespaces qns = query_namespaces(ns, nq);
            uint64_t mask[4];
            const uint64_t* maskp = nullptr;
            if (!layers.is_none()) {
              layer_mask_from(layers, mask);
              maskp = mask;
            }
            const auto al = optional_array<uint8_t>(allow, "allow", "uint8");
            auto [scores, ids] = alloc_out(nq, k);
            {
              const float* qp = static_cast<const float*>(q.data());
              float* so = scores.mutable_data();
              int64_t* io = ids.mutable_data();
              py::gil_scoped_release nogil;
              A.search(qp, nq, k, met, qns.ptr(), qns.n, maskp, threads, so, io,
                       static_cast<std::size_t>(oversample), al.data, al.size);
            }
            return py::make_tuple(scores, ids);
          },
          py::arg("queries"), py::arg("k"), py::arg("metric") = "ip",
          py::arg("namespace") = py::none(), py::arg("layers") = py::none(),
          py::arg("threads") = 0, py::arg("oversample") = 0, py::arg("allow") = py::none())
      .def("vectors_view",
           [](const VectorArena& A) {
             ArenaView v = A.view();
             auto* keep = new std::shared_ptr<void>(v.storage);
             py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
             const py::ssize_t elt = v.dtype == DType::F16 ? 2 : 4;
             py::array arr(py::dtype(dtype_name(v.dtype)),
                           std::vector<py::ssize_t>{(py::ssize_t)v.rows, (py::ssize_t)v.dim},
                           std::vector<py::ssize_t>{(py::ssize_t)v.stride * elt, elt},
                           v.storage.get(), owner);
             py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
             return arr;
           });
}

}  // namespace

void register_search(py::module_& m) {
  register_topk(m);
  register_arena(m);
}

}  // namespace lamina::py_detail
