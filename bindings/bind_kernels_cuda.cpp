// The GPU twins of bind_kernels.cpp: the memory kernels (lamina.kernels) on device arrays.
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
#include "kernels.hpp"

namespace lamina::py_detail {

namespace {

template <bool kDamped>
void cuda_rows_call(const py::object& rows, const py::object& targets, const py::object& param,
                    const py::object& index, bool renormalize, const py::object& out,
                    std::uintptr_t stream, const char* pname) {
  CudaArray r = checked_cuda_array(rows, "rows", 2, "f4", "float32", true);
  CudaArray t = checked_cuda_array(targets, "targets", 2, "f4", "float32", false);
  check_targets(r.shape[1], t.shape);
  const std::size_t n = r.shape[0], d = r.shape[1], m = t.shape[0];
  DeviceCall call;
  call.add(r, "rows");
  call.add(t, "targets");
  const int64_t* idx = nullptr;
  if (!index.is_none()) {
    CudaArray ia = checked_cuda_array(index, "index", 1, "i8", "int64", false);
    check_index(ia.shape[0], m, n);
    call.add(ia, "index");
    idx = ia.as<const int64_t>();
  } else {
    check_index(-1, m, n);
  }
  cuda::DeviceParam p = device_param(param, m, pname, call);
  CudaArray o = checked_cuda_array(out, "out", 1, "f4", "float32", true);
  check_shape("out", o.shape, {static_cast<py::ssize_t>(m)});
  call.add(o, "out");
  call.launch(stream, [&](void* st) {
    if constexpr (kDamped)
      cuda::damped_update(r.as<float>(), n, d, t.as<const float>(), m, idx, p, o.as<float>(), st);
    else
      cuda::ema_blend(r.as<float>(), n, d, t.as<const float>(), m, idx, p, renormalize,
                      o.as<float>(), st);
  });
}


void register_heat_blend_cuda(py::module_& m) {
  // ---- memory kernels (lamina.kernels on device arrays) ----------------------------------
  m.def(
      "cuda_heat_scores",
      [](const py::object& visits, const py::object& ilen, const py::object& last, double now,
         double a, double b, double c, double mu, const py::object& out, std::uintptr_t stream) {
        CudaArray v = vec1d(visits, "visits");
        CudaArray l = vec1d(ilen, "interaction_len");
        CudaArray t = checked_cuda_array(last, "last_access", 1, "f8", "float64", false);
        CudaArray o = checked_cuda_array(out, "out", 1, "f4", "float32", true);
        const cuda::ColKind vk = col_kind(v, "visits"), lk = col_kind(l, "interaction_len");
        const py::ssize_t n = t.shape[0];
        check_length("visits", v.shape[0], n, "one per row, like last_access");
        check_length("interaction_len", l.shape[0], n, "one per row, like last_access");
        check_shape("out", o.shape, {n});
        DeviceCall call;
        call.add(v, "visits");
        call.add(l, "interaction_len");
        call.add(t, "last_access");
        call.add(o, "out");
        call.launch(
            stream,
            [&](void* st) {
              cuda::heat_scores(v.as<const void>(), vk, l.as<const void>(), lk,
                                t.as<const double>(), n, now, a, b, c, mu, o.as<float>(), st);
            },
            [&] {  // n == 0: nothing to do, but the parameters are still checked
              cuda::heat_scores(nullptr, vk, nullptr, lk, nullptr, 0, now, a, b, c, mu, nullptr,
                                nullptr);
            });
      },
      py::arg("visits"), py::arg("interaction_len"), py::arg("last_access"), py::arg("now"),
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("mu"), py::arg("out"), py::arg("stream"));
  m.def("cuda_ema_blend",
        [](const py::object& rows, const py::object& targets, const py::object& alpha,
           const py::object& index, bool renormalize, const py::object& out, std::uintptr_t stream) {
          cuda_rows_call<false>(rows, targets, alpha, index, renormalize, out, stream, "alpha");
        },
        py::arg("rows"), py::arg("targets"), py::arg("alpha"), py::arg("index"),
        py::arg("renormalize"), py::arg("out"), py::arg("stream"));
  m.def("cuda_damped_update",
        [](const py::object& rows, const py::object& targets, const py::object& lam,
           const py::object& index, const py::object& out, std::uintptr_t stream) {
          cuda_rows_call<true>(rows, targets, lam, index, false, out, stream, "lam");
        },
        py::arg("rows"), py::arg("targets"), py::arg("lam"), py::arg("index"), py::arg("out"),
        py::arg("stream"));
}

void register_gate_evict_cuda(py::module_& m) {
  m.def(
      "cuda_softmax_gate",
      [](const py::object& relevance, const py::object& beta, const py::object& max_entropy,
         int max_doublings, const py::object& gamma, const py::object& beta_used,
         std::uintptr_t stream) {
        CudaArray r = checked_cuda_array(relevance, "relevance", 2, "f4", "float32", false);
        CudaArray g = checked_cuda_array(gamma, "out", 2, "f4", "float32", true);
        CudaArray bu = checked_cuda_array(beta_used, "beta_used", 1, "f8", "float64", true);
        const std::size_t b = r.shape[0], L = r.shape[1];
        check_shape("out", g.shape, r.shape);
        LAMINA_CHECK(static_cast<std::size_t>(bu.shape[0]) == b, "beta_used must have length ", b);
        DeviceCall call;
        call.add(r, "relevance");
        call.add(g, "out");
        call.add(bu, "beta_used");
        cuda::DeviceParam p = device_param(beta, b, "beta", call);
        const bool has_eps = !max_entropy.is_none();
        const double eps = has_eps ? max_entropy.cast<double>() : 0.0;
        call.launch(
            stream,
            [&](void* st) {
              cuda::softmax_gate(r.as<const float>(), b, L, p, has_eps, eps, max_doublings,
                                 g.as<float>(), bu.as<double>(), st);
            },
            [&] {  // b == 0: the parameters are still checked
              cuda::softmax_gate(nullptr, 0, L, p, has_eps, eps, max_doublings, nullptr, nullptr,
                                 nullptr);
            });
      },
      py::arg("relevance"), py::arg("beta"), py::arg("max_entropy"), py::arg("max_doublings"),
      py::arg("out"), py::arg("beta_used"), py::arg("stream"));
  m.def(
      "cuda_select_hot",
      [](const py::object& heat, double threshold, const py::object& namespaces,
         const py::object& out, std::uintptr_t stream) -> std::size_t {
        CudaArray h = checked_cuda_array(heat, "heat", 1, "f4", "float32", false);
        CudaArray o = checked_cuda_array(out, "out", 1, "i8", "int64", true);
        const std::size_t n = h.shape[0];
        LAMINA_CHECK(static_cast<std::size_t>(o.shape[0]) >= n, "out must have room for ", n,
                     " indices, got ", o.shape[0]);
        DeviceCall call;
        call.add(h, "heat");
        call.add(o, "out");
        const uint64_t* nsp = nullptr;
        if (!namespaces.is_none()) {
          CudaArray ns = checked_cuda_array(namespaces, "namespaces", 1, "u8", "uint64", false);
          check_length("namespaces", ns.shape[0], n, "one per heat value");
          call.add(ns, "namespaces");
          nsp = ns.as<const uint64_t>();
        }
        return call.launch(
            stream,
            [&](void* st) {
              return cuda::select_hot(h.as<const float>(), n, threshold, nsp, o.as<int64_t>(), st);
            },
            [&] { return cuda::select_hot(nullptr, 0, threshold, nullptr, nullptr, nullptr); });
      },
      py::arg("heat"), py::arg("threshold"), py::arg("namespaces"), py::arg("out"),
      py::arg("stream"));
  m.def(
      "cuda_evict_to_capacity",
      [](const py::object& scores, const py::object& namespaces, long long default_capacity,
         const py::object& cap_keys, const py::object& cap_values, const py::object& live,
         const py::object& out, std::uintptr_t stream) -> std::size_t {
        CudaArray s = checked_cuda_array(scores, "scores", 1, "f4", "float32", false);
        CudaArray ns = checked_cuda_array(namespaces, "namespaces", 1, "u8", "uint64", false);
        CudaArray o = checked_cuda_array(out, "out", 1, "i8", "int64", true);
        py::array keys = checked_array<uint64_t>(cap_keys, "capacity keys", 1, "uint64");
        py::array vals = checked_array<int64_t>(cap_values, "capacity values", 1, "int64");
        check_capacity(keys.shape(0), vals.shape(0));
        const std::size_t n = s.shape[0];
        check_evict_namespaces(ns.shape[0], n);
        LAMINA_CHECK(static_cast<std::size_t>(o.shape[0]) >= n, "out must have room for ", n,
                     " indices, got ", o.shape[0]);
        DeviceCall call;
        call.add(s, "scores");
        call.add(ns, "namespaces");
        call.add(o, "out");
        const uint8_t* lp = nullptr;
        if (!live.is_none()) {
          CudaArray lv = parse_cai(live, "live");
          LAMINA_CHECK(lv.shape.size() == 1 && lv.c_contiguous(), "live must be 1-dimensional and contiguous");
          if (!((lv.kind == 'b' || lv.kind == 'u') && lv.itemsize == 1))
            throw TypeError("live must have dtype bool or uint8, got typestr '" + lv.typestr +
                            "'; convert explicitly, e.g. live.astype('uint8')");
          check_length("live", lv.shape[0], n, "one per row");
          call.add(lv, "live");
          lp = lv.as<const uint8_t>();
        }
        const uint64_t* kp = static_cast<const uint64_t*>(keys.data());
        const int64_t* vp = static_cast<const int64_t*>(vals.data());
        const std::size_t nc = keys.shape(0);
        return call.launch(
            stream,
            [&](void* st) {
              return cuda::evict_to_capacity(s.as<const float>(), ns.as<const uint64_t>(), n, lp,
                                             default_capacity, kp, vp, nc, o.as<int64_t>(), st);
            },
            [&] {
              return cuda::evict_to_capacity(nullptr, nullptr, 0, nullptr, default_capacity, kp,
                                             vp, nc, nullptr, nullptr);
            });
      },
      py::arg("scores"), py::arg("namespaces"), py::arg("default_capacity"), py::arg("cap_keys"),
      py::arg("cap_values"), py::arg("live"), py::arg("out"), py::arg("stream"));
}

}  // namespace

void register_kernels_cuda(py::module_& m) {
  register_heat_blend_cuda(m);
  register_gate_evict_cuda(m);
}

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
