// The GPU twins of bind_search.cpp: the device top-k (cuda_topk) and the GPU-resident arena
// (CudaVectorArena). Arrays are checked with the host bindings' rules (checks.hpp) wherever a
// rule is not about the kind of array; launches go through DeviceCall (cuda_call.hpp).
#if defined(LAMINA_WITH_CUDA)
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "cuda_array.hpp"
#include "cuda_call.hpp"
#include "arena.hpp"
#include "lamina/arena.hpp"
#include "lamina/codec.hpp"
#include "lamina/topk.hpp"
#include "topk.hpp"

namespace lamina::py_detail {

namespace {

using CA = cuda::CudaVectorArena;
using ArenaClass = py::class_<CA, std::shared_ptr<CA>>;

void register_topk_cuda(py::module_& m) {
  m.def(
      "cuda_topk",
      [](const py::object& queries, const py::object& vectors, long long k,
         const std::string& metric, const py::object& out_scores, const py::object& out_ids,
         std::uintptr_t stream) {
        check_k(k);
        const Metric met = parse_metric(metric);
        CudaArray v = parse_cai(vectors, "vectors");
        if (!(v.kind == 'f' && (v.itemsize == 4 || v.itemsize == 2)))
          throw TypeError("vectors must have dtype float32 or float16, got typestr '" + v.typestr + "'");
        const std::size_t vstride = row_stride_elems(v, "vectors");
        LAMINA_CHECK(v.shape[0] > 0, "vectors is empty (0 rows); nothing to search");
        LAMINA_CHECK(v.shape[1] > 0, "vectors must have at least one column");
        const std::size_t dim = v.shape[1], n = v.shape[0];
        CudaArray q = checked_cuda_array(queries, "queries", 2, "f4", "float32", false);
        check_columns("queries", q.shape[0], q.shape[1], dim, "the vectors' dim");
        const std::size_t nq = q.shape[0];
        const auto outs = search_outputs(out_scores, out_ids, nq, k);
        const CudaArray &so = outs.first, &io = outs.second;
        DeviceCall call;
        call.add(q, "queries");
        call.add(v, "vectors");
        call.add(so, "out scores");
        call.add(io, "out ids");
        if (nq == 0) return;
        cuda::DeviceRows rows;
        rows.base = v.as<const void>();
        rows.stride = vstride;
        rows.dim = dim;
        rows.f16 = is_f16_code(v);
        call.launch(stream, [&](void* st) {
          cuda::topk_search(q.as<const float>(), nq, rows, n, cuda::DeviceFilter{},
                            static_cast<std::size_t>(k), met, nullptr, so.as<float>(),
                            io.as<int64_t>(), st);
        });
      },
      py::arg("queries"), py::arg("vectors"), py::arg("k"), py::arg("metric"),
      py::arg("out_scores"), py::arg("out_ids"), py::arg("stream"));
}

// construction and the rows: add, remove, get, set_layer
void def_arena_rows_cuda(ArenaClass& arena_cls) {
  arena_cls
      .def(py::init([](long long dim, const std::string& dtype, long long capacity, int device,
                       const py::object& codec) {
             const ArenaArgs a = arena_args(dim, dtype, capacity, codec);
             return std::make_shared<CA>(a.dim, a.dtype, a.capacity, device, a.codec);
           }),
           py::arg("dim"), py::arg("dtype") = "float32", py::arg("capacity") = 1024,
           py::arg("device") = 0, py::arg("codec") = py::none())
      .def_property_readonly("device", &CA::device)
      .def(
          "add",
          [](CA& A, const py::object& vectors, const py::object& ns, const py::object& layer,
             std::uintptr_t stream) {
            const bool f16 = A.dtype() == DType::F16;
            const void* src = nullptr;
            bool on_device = false;
            std::size_t n = 0;
            py::array host;
            DeviceCall call;
            if (has_cai(vectors)) {
              CudaArray v = checked_cuda_array(vectors, "vectors", 2, f16 ? "f2" : "f4",
                                               f16 ? "float16" : "float32", false);
              check_columns("vectors", v.shape[0], v.shape[1], A.dim(), "the arena's dim");
              call.add(v, "vectors");
              LAMINA_CHECK(v.size() == 0 || call.device == A.device(), "vectors are on cuda:",
                           call.device, " but the arena is on cuda:", A.device());
              src = v.as<const void>();
              on_device = true;
              n = v.shape[0];
            } else {
              if (!py::isinstance<py::array>(vectors))
                throw TypeError(std::string("vectors must be a numpy array or a CUDA array of dtype ") +
                                (f16 ? "float16" : "float32"));
              host = check_host_vectors(vectors, A.dtype(), A.dim());
              src = host.data();
              n = host.shape(0);
            }
            const RowLabels lab = row_labels(ns, layer, n);
            py::array_t<int64_t> out(n);
            int64_t* o = out.mutable_data();
            call.run_on(A.device(), stream, [&](void* st) {
              A.add(src, on_device, n, lab.ns(), lab.ns_rows, lab.layer(), lab.layer_rows, o, st);
            });
            return out;
          },
          py::arg("vectors"), py::arg("namespace") = 0, py::arg("layer") = 0, py::arg("stream") = 0)
      .def(
          "remove",
          [](CA& A, const py::object& slots, std::uintptr_t stream) {
            remove_slots(A, slots, as_stream(stream));
          },
          py::arg("slots"), py::arg("stream") = 0)
      .def(
          "get",
          [](const CA& A, const py::object& slots, std::uintptr_t stream) {
            return get_slots(A, slots, as_stream(stream));
          },
          py::arg("slots"), py::arg("stream") = 0)
      .def("set_layer",
           [](CA& A, const py::object& slots, long long layer, std::uintptr_t stream) {
             check_layer(layer);
             py::array s = check_slots(slots);
             A.set_layer(static_cast<const int64_t*>(s.data()), s.shape(0),
                         static_cast<uint8_t>(layer), as_stream(stream));
           },
           py::arg("slots"), py::arg("layer"), py::arg("stream") = 0);
}

// the device view and the searches
void def_arena_search_cuda(ArenaClass& arena_cls) {
  arena_cls
      .def("device_view",
           [](const CA& A) {
             py::dict d;
             d["ptr"] = py::int_(reinterpret_cast<std::uintptr_t>(A.device_rows()));
             d["rows"] = A.high_water();
             d["dim"] = A.dim();
             d["stride"] = A.stride();
             d["typestr"] = A.dtype() == DType::F16 ? "<f2" : "<f4";
             d["stream"] = py::int_(reinterpret_cast<std::uintptr_t>(A.stream()));
             return d;
           })
      .def(
          "search",
          [](const CA& A, const py::object& queries, long long k, const std::string& metric,
             const py::object& ns, const py::object& layers, const py::object& out_scores,
             const py::object& out_ids, std::uintptr_t stream, long long oversample) -> py::object {
            check_k(k);
            LAMINA_CHECK(oversample >= 0, "oversample must be >= 0, got ", oversample);
            const std::size_t r = static_cast<std::size_t>(oversample);
            const Metric met = parse_metric(metric);
            uint64_t mask[4];
            const uint64_t* maskp = nullptr;
            if (!layers.is_none()) {
              layer_mask_from(layers, mask);
              maskp = mask;
            }
            if (!has_cai(queries)) {
              py::array q = check_host_queries(queries, A.dim(), "the arena's dim");
              const std::size_t nq = q.shape(0);
              const float* qp = static_cast<const float*>(q.data());
              const QueryNamespaces qns = query_namespaces(ns, nq);
              py::array_t<float> scores({nq, static_cast<std::size_t>(k)});
              py::array_t<int64_t> ids({nq, static_cast<std::size_t>(k)});
              {
                float* so = scores.mutable_data();
                int64_t* io = ids.mutable_data();
                py::gil_scoped_release nogil;
                A.search_host(qp, nq, k, met, qns.ptr(), qns.n, maskp, so, io, r);
              }
              return py::make_tuple(scores, ids);
            }
            CudaArray q = checked_cuda_array(queries, "queries", 2, "f4", "float32", false);
            check_columns("queries", q.shape[0], q.shape[1], A.dim(), "the arena's dim");
            const std::size_t nq = q.shape[0];
            const QueryNamespaces qns = query_namespaces(ns, nq);
            const auto outs = search_outputs(out_scores, out_ids, nq, k);
            const CudaArray &so = outs.first, &io = outs.second;
            DeviceCall call;
            call.add(q, "queries");
            call.add(so, "out scores");
            call.add(io, "out ids");
            LAMINA_CHECK(call.device < 0 || call.device == A.device(), "queries are on cuda:",
                         call.device, " but the arena is on cuda:", A.device());
            if (nq > 0)
              call.run_on(A.device(), stream, [&](void* st) {
                A.search(q.as<const float>(), nq, k, met, qns.ptr(), qns.n, maskp, so.as<float>(),
                         io.as<int64_t>(), st, r);
              });
            return py::make_tuple(out_scores, out_ids);
          },
          py::arg("queries"), py::arg("k"), py::arg("metric") = "ip",
          py::arg("namespace") = py::none(), py::arg("layers") = py::none(),
          py::arg("out_scores") = py::none(), py::arg("out_ids") = py::none(),
          py::arg("stream") = 0, py::arg("oversample") = 0);
}

// ---- the GPU-resident arena ------------------------------------------------------------
void register_arena_cuda(py::module_& m) {
  ArenaClass arena_cls(m, "CudaVectorArena");
  def_arena_common<CA>(arena_cls);
  def_arena_rows_cuda(arena_cls);
  def_arena_search_cuda(arena_cls);
}

}  // namespace

void register_search_cuda(py::module_& m) {
  register_topk_cuda(m);
  register_arena_cuda(m);
}

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
