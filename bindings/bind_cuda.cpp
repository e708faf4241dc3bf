// Bindings of the CUDA backend: __cuda_array_interface__ parsing (every build) and, in CUDA
// builds, the device top-k, memory kernels, KV selection and the GPU-resident arena. Device
// selection and output allocation (CuPy / PyTorch) happen in python/lamina/_device.py; here
// arrays are validated (with the host bindings' rules, checks.hpp, wherever a rule is not about
// the kind of array), their device is resolved from the data pointer, and every launch goes
// through DeviceCall::launch / run_on: the GIL released, the device made current, the
// execution stream waiting for every producer stream the arrays name.
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "cuda_array.hpp"
#include "lamina/arena.hpp"
#include "lamina/codec.hpp"
#include "lamina/topk.hpp"
#if defined(LAMINA_WITH_CUDA)
#include "arena_cuda.hpp"
#include "fleet_cuda.hpp"
#include "kernels_cuda.hpp"
#include "kv_cuda.hpp"
#include "lamina_cuda.hpp"
#include "topk_cuda.hpp"
#endif

namespace lamina::py_detail {

namespace {

py::dict cai_info(const CudaArray& a) {
  py::dict d;
  d["ptr"] = py::int_(a.ptr);
  d["shape"] = py::tuple(py::cast(a.shape));
  d["strides"] = a.strides.empty() ? py::object(py::none()) : py::object(py::tuple(py::cast(a.strides)));
  d["typestr"] = a.typestr;
  d["itemsize"] = a.itemsize;
  d["readonly"] = a.readonly;
  d["version"] = a.version;
  d["stream"] = a.has_stream ? py::object(py::int_(a.stream)) : py::object(py::none());
  d["c_contiguous"] = a.c_contiguous();
  return d;
}

#if defined(LAMINA_WITH_CUDA)

void* as_stream(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

// Device of a set of arrays (all must agree) and the producer streams to wait for; runs the
// launch.
struct DeviceCall {
  int device = -1;
  std::string first;
  std::vector<std::uintptr_t> producers;

  void add(const CudaArray& a, const char* name) {
    // each producer stream once (every array of a CuPy call names the same current stream)
    if (a.has_stream && std::find(producers.begin(), producers.end(), a.stream) == producers.end())
      producers.push_back(a.stream);
    if (a.size() == 0) return;
    const int dev = cuda::pointer_device(reinterpret_cast<const void*>(a.ptr));
    if (device < 0) {
      device = dev;
      first = name;
    } else {
      LAMINA_CHECK(dev == device, name, " is on cuda:", dev, " but ", first, " is on cuda:",
                   device, "; pass all arrays on one device (lamina never copies between devices)");
    }
  }

  // The launch tail: with the GIL released and `dev` current, the execution stream waits for
  // the producers, then f(stream) runs (its result is returned).
  template <class F>
  auto run_on(int dev, std::uintptr_t stream, F&& f) const {
    py::gil_scoped_release nogil;
    cuda::DeviceGuard guard(dev);
    for (std::uintptr_t p : producers) cuda::stream_wait(as_stream(stream), as_stream(p));
    return f(as_stream(stream));
  }
  // The same on the arrays' device; when no array has elements (device < 0) empty() runs
  // instead, with the GIL released and no device made current.
  template <class F, class E>
  auto launch(std::uintptr_t stream, F&& f, E&& empty) const {
    if (device < 0) {
      py::gil_scoped_release nogil;
      return empty();
    }
    return run_on(device, stream, std::forward<F>(f));
  }
  template <class F>
  void launch(std::uintptr_t stream, F&& f) const {
    launch(stream, std::forward<F>(f), [] {});
  }
};

bool is_f16_code(const CudaArray& a) { return a.kind == 'f' && a.itemsize == 2; }

// 2-D rows with unit inner stride (row padding allowed); returns the row stride in elements.
std::size_t row_stride_elems(const CudaArray& a, const char* name) {
  LAMINA_CHECK(a.shape.size() == 2, name, " must be 2-dimensional (n x dim), got ndim=",
               a.shape.size());
  if (a.strides.empty()) return static_cast<std::size_t>(a.shape[1]);
  LAMINA_CHECK(a.shape[1] <= 1 || a.strides[1] == a.itemsize, name,
               " must have contiguous rows; pass ", name, ".copy()");
  LAMINA_CHECK(a.shape[0] <= 1 || (a.strides[0] % a.itemsize == 0 &&
                                   a.strides[0] / a.itemsize >= a.shape[1]),
               name, " has an unsupported row stride; pass ", name, ".copy()");
  return a.shape[0] <= 1 ? static_cast<std::size_t>(a.shape[1])
                         : static_cast<std::size_t>(a.strides[0] / a.itemsize);
}

// The caller's device outputs of a search: scores (nq, k) float32 and ids (nq, k) int64.
std::pair<CudaArray, CudaArray> search_outputs(const py::object& out_scores,
                                               const py::object& out_ids, std::size_t nq,
                                               std::size_t k) {
  CudaArray s = checked_cuda_array(out_scores, "out scores", 2, "f4", "float32", true);
  CudaArray i = checked_cuda_array(out_ids, "out ids", 2, "i8", "int64", true);
  LAMINA_CHECK(static_cast<std::size_t>(s.shape[0]) == nq && static_cast<std::size_t>(s.shape[1]) == k,
               "out scores must have shape (", nq, ", ", k, "), got (", s.shape[0], ", ",
               s.shape[1], ")");
  LAMINA_CHECK(static_cast<std::size_t>(i.shape[0]) == nq && static_cast<std::size_t>(i.shape[1]) == k,
               "out ids must have shape (", nq, ", ", k, "), got (", i.shape[0], ", ", i.shape[1],
               ")");
  return {std::move(s), std::move(i)};
}

cuda::ColKind col_kind(const CudaArray& a, const char* name) {
  if (a.kind == 'f' && a.itemsize == 4) return cuda::ColKind::F32;
  if (a.kind == 'i' && a.itemsize == 4) return cuda::ColKind::I32;
  if (a.kind == 'i' && a.itemsize == 8) return cuda::ColKind::I64;
  throw TypeError(std::string(name) + " must have dtype float32, int32 or int64, got typestr '" +
                  a.typestr + "'; convert explicitly with .astype(...)");
}

CudaArray vec1d(const py::handle& obj, const char* name) {
  CudaArray a = parse_cai(obj, name);
  LAMINA_CHECK(a.shape.size() == 1, name, " must be 1-dimensional, got ndim=", a.shape.size());
  LAMINA_CHECK(a.c_contiguous(), name, " must be contiguous; pass ", name, ".copy()");
  return a;
}

// Scalar or per-row (device float32 / float64, length m) parameter.
cuda::DeviceParam device_param(const py::object& p, std::size_t m, const char* name, DeviceCall& call) {
  cuda::DeviceParam out;
  if (!has_cai(p)) {
    if (!(py::isinstance<py::float_>(p) || py::isinstance<py::int_>(p)))
      throw TypeError(std::string(name) + " must be a float or a CUDA array of float32/float64");
    out.scalar = p.cast<double>();
    return out;
  }
  CudaArray a = vec1d(p, name);
  LAMINA_CHECK(static_cast<std::size_t>(a.shape[0]) == m, name, " must have one value per updated row (",
               m, "), got ", a.shape[0]);
  call.add(a, name);
  if (a.kind == 'f' && a.itemsize == 4) out.f32 = a.as<const float>();
  else if (a.kind == 'f' && a.itemsize == 8) out.f64 = a.as<const double>();
  else throw TypeError(std::string(name) + " must have dtype float32 or float64, got '" + a.typestr + "'");
  return out;
}

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

#endif  // LAMINA_WITH_CUDA

}  // namespace

void register_cuda(py::module_& m) {
  m.def("_cuda_array_info",
        [](const py::object& obj, const std::string& name) { return cai_info(parse_cai(obj, name.c_str())); },
        py::arg("obj"), py::arg("name") = "array",
        "Parsed, validated __cuda_array_interface__ of obj (no device access).");
  m.def("_check_cuda_array",
        [](const py::object& obj, const std::string& name, int ndim, const std::string& code,
           const std::string& fix, bool writable) {
          return cai_info(checked_cuda_array(obj, name.c_str(), ndim, code.c_str(), fix.c_str(), writable));
        },
        py::arg("obj"), py::arg("name"), py::arg("ndim"), py::arg("dtype_code"),
        py::arg("fix_dtype"), py::arg("writable") = false);

#if defined(LAMINA_WITH_CUDA)
  m.def("cuda_pointer_device", [](std::uintptr_t ptr) {
    return cuda::pointer_device(reinterpret_cast<const void*>(ptr));
  });
  m.def("cuda_max_k", []() { return cuda::kMaxK; });

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

  // ---- KV selection (lamina.kv on device arrays) -----------------------------------------
  m.def(
      "cuda_kv_window_scores",
      [](const py::object& x, long long kv_heads, long long n_candidates,
         const std::string& window_reduce, bool causal_normalize, const std::string& pool,
         long long kernel, const std::string& group_reduce, const py::object& scale_per_row,
         const py::object& scale_per_token, const py::object& out, std::uintptr_t stream) {
        CudaArray a = parse_cai(x, "scores");
        LAMINA_CHECK(a.shape.size() == 3 || a.shape.size() == 4,
                     "scores must be (L, H, S) or (L, H, w, S), got ndim=", a.shape.size());
        a = checked_cuda_array(x, "scores", static_cast<int>(a.shape.size()), "f4", "float32", false);
        const lamina::kv::ScoreSpec sp =
            score_spec(std::vector<std::size_t>(a.shape.begin(), a.shape.end()), kv_heads,
                       n_candidates, window_reduce, causal_normalize, pool, kernel, group_reduce);
        DeviceCall call;
        call.add(a, "scores");
        const float* per_row = nullptr;
        const float* per_token = nullptr;
        if (!scale_per_row.is_none()) {
          CudaArray v = checked_cuda_array(scale_per_row, "value_norms", 2, "f4", "float32", false);
          check_value_norms(v.shape, sp);
          call.add(v, "value_norms");
          per_row = v.as<const float>();
        }
        if (!scale_per_token.is_none()) {
          CudaArray v = checked_cuda_array(scale_per_token, "value_norms", 3, "f4", "float32", false);
          check_value_norms(v.shape, sp);
          call.add(v, "value_norms");
          per_token = v.as<const float>();
        }
        CudaArray o = checked_cuda_array(out, "out", 3, "f4", "float32", true);
        LAMINA_CHECK(static_cast<std::size_t>(o.shape[0]) == sp.layers &&
                         static_cast<std::size_t>(o.shape[1]) == sp.kv_heads &&
                         static_cast<std::size_t>(o.shape[2]) == sp.n_candidates,
                     "out must have shape (", sp.layers, ", ", sp.kv_heads, ", ", sp.n_candidates, ")");
        call.add(o, "out");
        // scores are non-empty (score_spec), so the call has a device
        call.launch(stream, [&](void* st) {
          cuda::kv::window_scores(a.as<const float>(), sp, per_row, per_token, o.as<float>(), st);
        });
      },
      py::arg("scores"), py::arg("kv_heads"), py::arg("n_candidates"), py::arg("window_reduce"),
      py::arg("causal_normalize"), py::arg("pool"), py::arg("kernel"), py::arg("group_reduce"),
      py::arg("scale_per_row"), py::arg("scale_per_token"), py::arg("out"), py::arg("stream"));
  m.def(
      "cuda_kv_layer_entropy",
      [](const py::object& scores, std::uintptr_t stream) {
        CudaArray s = checked_cuda_array(scores, "scores", 3, "f4", "float32", false);
        const std::size_t L = s.shape[0], Hkv = s.shape[1], n = s.shape[2];
        DeviceCall call;
        call.add(s, "scores");
        py::array_t<double> out(L);
        double* o = out.mutable_data();
        call.launch(
            stream,
            [&](void* st) { cuda::kv::layer_entropy(s.as<const float>(), L, Hkv, n, o, st); },
            [&] {
              for (std::size_t l = 0; l < L; ++l) o[l] = 0.0;
            });
        return out;
      },
      py::arg("scores"), py::arg("stream"));
  m.def(
      "cuda_kv_layer_head_counts",
      [](const py::object& scores, const py::object& total, const py::object& floor,
         std::uintptr_t stream) {
        CudaArray s = checked_cuda_array(scores, "scores", 3, "f4", "float32", false);
        const std::size_t L = s.shape[0], Hkv = s.shape[1], n = s.shape[2];
        py::array t = checked_array<int64_t>(total, "total", 1, "int64");
        check_per_layer("total", t.shape(0), L);
        py::array f;
        const int64_t* fp = nullptr;
        if (!floor.is_none()) {
          f = checked_array<int64_t>(floor, "floor", 1, "int64");
          check_per_layer("floor", f.shape(0), L);
          fp = static_cast<const int64_t*>(f.data());
        }
        DeviceCall call;
        call.add(s, "scores");
        py::array_t<int64_t> out({L, Hkv});
        const int64_t* tp = static_cast<const int64_t*>(t.data());
        int64_t* o = out.mutable_data();
        auto counts = [&](void* st) {
          cuda::kv::layer_head_counts(s.as<const float>(), L, Hkv, n, tp, fp, o, st);
        };
        // empty scores: the counts still come from the totals and floors (no device needed)
        call.launch(stream, counts, [&] { counts(as_stream(stream)); });
        return out;
      },
      py::arg("scores"), py::arg("total"), py::arg("floor"), py::arg("stream"));
  m.def(
      "cuda_kv_select_rows",
      [](const py::object& scores, const py::object& k, long long n, long long tail,
         const py::object& out, std::uintptr_t stream) {
        py::array kk = checked_array<int64_t>(k, "k", 2, "int64");
        const std::size_t L = kk.shape(0), Hkv = kk.shape(1), R = L * Hkv;
        check_select_rows(n, tail);
        DeviceCall call;
        const float* sp = nullptr;
        if (!scores.is_none()) {
          CudaArray s = checked_cuda_array(scores, "scores", 3, "f4", "float32", false);
          check_select_scores(s.shape, L, Hkv, n);
          call.add(s, "scores");
          sp = s.as<const float>();
        }
        const int64_t* kp = static_cast<const int64_t*>(kk.data());
        py::array_t<int64_t> offsets(R + 1);
        int64_t* op = offsets.mutable_data();
        kv_offsets(kp, R, Hkv, n, tail, op);
        CudaArray o = checked_cuda_array(out, "out", 1, "i8", "int64", true);
        LAMINA_CHECK(o.shape[0] == op[R], "out must have length ", op[R], " (the kept total), got ",
                     o.shape[0]);
        call.add(o, "out");
        call.launch(stream, [&](void* st) {
          cuda::kv::select_rows(sp, R, static_cast<std::size_t>(n), kp,
                                static_cast<std::size_t>(tail), op, o.as<int64_t>(), st);
        });
        return offsets;
      },
      py::arg("scores"), py::arg("k"), py::arg("n"), py::arg("tail"), py::arg("out"),
      py::arg("stream"));
  m.def(
      "cuda_kv_fill_rows",
      [](const py::object& pattern, long long n_rows, const py::object& out, std::uintptr_t stream) {
        py::array p = checked_array<int64_t>(pattern, "pattern", 1, "int64");
        LAMINA_CHECK(n_rows >= 0, "n_rows must be >= 0");
        CudaArray o = checked_cuda_array(out, "out", 1, "i8", "int64", true);
        const std::size_t len = p.shape(0);
        LAMINA_CHECK(static_cast<std::size_t>(o.shape[0]) == len * static_cast<std::size_t>(n_rows),
                     "out must have length ", len * n_rows);
        DeviceCall call;
        call.add(o, "out");
        const int64_t* pp = static_cast<const int64_t*>(p.data());
        call.launch(stream, [&](void* st) {
          cuda::kv::fill_rows(pp, len, static_cast<std::size_t>(n_rows), o.as<int64_t>(), st);
        });
      },
      py::arg("pattern"), py::arg("n_rows"), py::arg("out"), py::arg("stream"));
  m.def(
      "cuda_kv_l1_norms",
      [](const py::object& values, const py::object& out, std::uintptr_t stream) {
        CudaArray v = parse_cai(values, "values");
        LAMINA_CHECK(v.shape.size() >= 1, "values must have at least one dimension");
        v = checked_cuda_array(values, "values", static_cast<int>(v.shape.size()), "f4", "float32", false);
        const std::size_t D = v.shape.back();
        check_head_dim(D);
        const std::size_t rows = static_cast<std::size_t>(v.size()) / D;
        CudaArray o = checked_cuda_array(out, "out", static_cast<int>(v.shape.size()) - 1, "f4",
                                         "float32", true);
        LAMINA_CHECK(static_cast<std::size_t>(o.size()) == rows, "out must hold ", rows, " norms");
        DeviceCall call;
        call.add(v, "values");
        call.add(o, "out");
        call.launch(stream, [&](void* st) {
          cuda::kv::l1_norms(v.as<const float>(), rows, D, o.as<float>(), st);
        });
      },
      py::arg("values"), py::arg("out"), py::arg("stream"));
  m.def(
      "cuda_kv_gather",
      [](const py::object& src, const py::object& offsets_dev, const py::object& offsets_host,
         const py::object& indices, long long padded_len, const py::object& out,
         std::uintptr_t stream) {
        CudaArray a = parse_cai(src, "keys/values");
        LAMINA_CHECK(a.shape.size() == 4, "keys/values must be 4-dimensional (L, H_kv, S, D), got ndim=",
                     a.shape.size());
        LAMINA_CHECK(a.c_contiguous(), "keys/values must be C-contiguous; pass a contiguous copy");
        const std::size_t L = a.shape[0], Hkv = a.shape[1], S = a.shape[2], D = a.shape[3];
        const std::size_t R = L * Hkv;
        py::array oh = checked_array<int64_t>(offsets_host, "offsets", 1, "int64");
        check_offsets_count(oh.shape(0), R);
        const int64_t* ohp = static_cast<const int64_t*>(oh.data());
        CudaArray od = checked_cuda_array(offsets_dev, "offsets (device)", 1, "i8", "int64", false);
        CudaArray id = checked_cuda_array(indices, "indices", 1, "i8", "int64", false);
        LAMINA_CHECK(static_cast<std::size_t>(od.shape[0]) == R + 1, "device offsets must have ", R + 1, " entries");
        check_offsets_span(ohp, R, id.shape[0]);
        CudaArray o = parse_cai(out, "out");
        LAMINA_CHECK(o.typestr == a.typestr, "out must have the dtype of keys/values");
        LAMINA_CHECK(o.c_contiguous() && !o.readonly, "out must be contiguous and writable");
        const std::size_t rows_out = padded_len > 0 ? R * static_cast<std::size_t>(padded_len)
                                                    : static_cast<std::size_t>(ohp[R]);
        LAMINA_CHECK(static_cast<std::size_t>(o.size()) == rows_out * D, "out has the wrong size");
        DeviceCall call;
        call.add(a, "keys/values");
        call.add(od, "offsets");
        call.add(id, "indices");
        call.add(o, "out");
        const std::size_t row_bytes = D * static_cast<std::size_t>(a.itemsize);
        call.launch(stream, [&](void* st) {
          cuda::kv::gather_rows(a.as<const void>(), R, S, row_bytes, od.as<const int64_t>(), ohp,
                                id.as<const int64_t>(),
                                static_cast<std::size_t>(padded_len > 0 ? padded_len : 0),
                                o.as<void>(), st);
        });
      },
      py::arg("src"), py::arg("offsets_dev"), py::arg("offsets_host"), py::arg("indices"),
      py::arg("padded_len"), py::arg("out"), py::arg("stream"));

  // ---- the GPU-resident arena ------------------------------------------------------------
  using CA = cuda::CudaVectorArena;
  py::class_<CA, std::shared_ptr<CA>> arena_cls(m, "CudaVectorArena");
  def_arena_common<CA>(arena_cls);
  arena_cls
      .def(py::init([](long long dim, const std::string& dtype, long long capacity, int device,
                       const py::object& codec) {
             LAMINA_CHECK(dim >= 1, "dim must be >= 1, got ", dim);
             LAMINA_CHECK(capacity >= 0, "capacity must be >= 0, got ", capacity);
             Codec c = Codec::None;
             if (!codec.is_none()) {
               if (!py::isinstance<py::str>(codec))
                 throw TypeError("codec must be 'binary', 'int8' or None");
               c = parse_codec(codec.cast<std::string>());
             }
             return std::make_shared<CA>(dim, parse_dtype(dtype), capacity, device, c);
           }),
           py::arg("dim"), py::arg("dtype") = "float32", py::arg("capacity") = 1024,
           py::arg("device") = 0, py::arg("codec") = py::none())
      .def_property_readonly("device", &CA::device)
      .def_property_readonly("codec",
                             [](const CA& A) -> py::object {
                               if (A.codec() == Codec::None) return py::none();
                               return py::str(codec_name(A.codec()));
                             })
      .def_property_readonly("code_bytes", &CA::code_stride)
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
      .def("remove",
           [](CA& A, const py::object& slots, std::uintptr_t stream) {
             py::array s = check_slots(slots);
             const int64_t* p = static_cast<const int64_t*>(s.data());
             const std::size_t n = s.shape(0);
             py::gil_scoped_release nogil;
             A.remove(p, n, as_stream(stream));
           },
           py::arg("slots"), py::arg("stream") = 0)
      .def("get",
           [](const CA& A, const py::object& slots, std::uintptr_t stream) {
             py::array s = check_slots(slots);
             const std::size_t n = s.shape(0);
             py::array out(A.dtype() == DType::F16 ? py::dtype("float16") : py::dtype("float32"),
                           std::vector<py::ssize_t>{(py::ssize_t)n, (py::ssize_t)A.dim()});
             {
               const int64_t* p = static_cast<const int64_t*>(s.data());
               void* o = out.mutable_data();
               py::gil_scoped_release nogil;
               A.get(p, n, o, as_stream(stream));
             }
             return out;
           },
           py::arg("slots"), py::arg("stream") = 0)
      .def("set_layer",
           [](CA& A, const py::object& slots, long long layer, std::uintptr_t stream) {
             check_layer(layer);
             py::array s = check_slots(slots);
             A.set_layer(static_cast<const int64_t*>(s.data()), s.shape(0),
                         static_cast<uint8_t>(layer), as_stream(stream));
           },
           py::arg("slots"), py::arg("layer"), py::arg("stream") = 0)
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

  // ---- the fleet step (search -> gate -> heat bump as one graph launch) -------------------
  using FS = cuda::FleetStep;
  py::class_<FS, std::shared_ptr<FS>>(m, "CudaFleetStep")
      .def(py::init([](std::shared_ptr<CA> arena, const std::vector<long long>& layers,
                       long long k, long long oversample, const std::string& metric,
                       long long relevance_top,
                       double beta, const py::object& max_entropy, int max_doublings, double a,
                       double b, double c, double mu) {
             cuda::FleetParams p;
             for (long long l : layers) {
               check_layer(l);
               p.layers.push_back(static_cast<uint8_t>(l));
             }
             check_k(k);
             LAMINA_CHECK(relevance_top >= 1, "relevance_top must be >= 1, got ", relevance_top);
             LAMINA_CHECK(oversample >= 0, "oversample must be >= 0, got ", oversample);
             p.k = static_cast<std::size_t>(k);
             p.oversample = static_cast<std::size_t>(oversample);
             p.metric = parse_metric(metric);
             p.relevance_top = static_cast<std::size_t>(relevance_top);
             p.beta = beta;
             p.has_max_entropy = !max_entropy.is_none();
             p.max_entropy = p.has_max_entropy ? max_entropy.cast<double>() : 0.0;
             p.max_doublings = max_doublings;
             p.a = a;
             p.b = b;
             p.c = c;
             p.mu = mu;
             return std::make_shared<FS>(std::move(arena), std::move(p));
           }),
           py::arg("arena"), py::arg("layers"), py::arg("k"), py::arg("oversample"),
           py::arg("metric"),
           py::arg("relevance_top"), py::arg("beta"), py::arg("max_entropy"),
           py::arg("max_doublings"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("mu"))
      .def(
          "run",
          [](FS& F, const py::object& queries, const py::object& namespaces, double now,
             const py::object& visits, const py::object& interaction_len,
             const py::object& last_access, const py::object& heat, const py::object& scores,
             const py::object& ids, const py::object& relevance, const py::object& gamma,
             const py::object& beta_used, bool graph, std::uintptr_t stream) {
            const auto& prm = F.params();
            const py::ssize_t L = static_cast<py::ssize_t>(prm.layers.size());
            const py::ssize_t k = static_cast<py::ssize_t>(prm.k);
            // queries: a device array, or a numpy array (then staged with the step's one copy)
            const bool host_q = !has_cai(queries);
            CudaArray q;
            py::array hq;
            py::ssize_t nq = 0;
            if (host_q) {
              hq = check_host_queries(queries, F.dim(), "the arena's dim");
              nq = hq.shape(0);
            } else {
              q = checked_cuda_array(queries, "queries", 2, "f4", "float32", false);
              check_columns("queries", q.shape[0], q.shape[1], F.dim(), "the arena's dim");
              nq = q.shape[0];
            }
            py::array ns = checked_array<uint64_t>(namespaces, "namespaces", 1, "uint64");
            check_length("namespaces", ns.shape(0), nq, "one per query");
            CudaArray v = vec1d(visits, "visits");
            CudaArray il = vec1d(interaction_len, "interaction_len");
            CudaArray la = checked_cuda_array(last_access, "last_access", 1, "f8", "float64", true);
            CudaArray h = checked_cuda_array(heat, "heat", 1, "f4", "float32", true);
            LAMINA_CHECK(!v.readonly, "visits is read-only; the step bumps it in place");
            cuda::FleetColumns cols;
            cols.visits_kind = col_kind(v, "visits");
            cols.len_kind = col_kind(il, "interaction_len");
            const py::ssize_t n = la.shape[0];
            check_length("visits", v.shape[0], n, "one per arena row, like last_access");
            check_length("interaction_len", il.shape[0], n, "one per arena row, like last_access");
            check_length("heat", h.shape[0], n, "one per arena row, like last_access");
            CudaArray so = checked_cuda_array(scores, "out scores", 3, "f4", "float32", true);
            CudaArray io = checked_cuda_array(ids, "out ids", 3, "i8", "int64", true);
            CudaArray ro = checked_cuda_array(relevance, "out relevance", 2, "f4", "float32", true);
            CudaArray go = checked_cuda_array(gamma, "out gamma", 2, "f4", "float32", true);
            CudaArray bo = checked_cuda_array(beta_used, "out beta_used", 1, "f8", "float64", true);
            check_shape("out scores", so.shape, {nq, L, k});
            check_shape("out ids", io.shape, {nq, L, k});
            check_shape("out relevance", ro.shape, {nq, L});
            check_shape("out gamma", go.shape, {nq, L});
            check_shape("out beta_used", bo.shape, {nq});
            DeviceCall call;
            if (!host_q) call.add(q, "queries");
            const std::pair<const CudaArray*, const char*> all[] = {
                {&v, "visits"}, {&il, "interaction_len"},
                {&la, "last_access"}, {&h, "heat"}, {&so, "out scores"}, {&io, "out ids"},
                {&ro, "out relevance"}, {&go, "out gamma"}, {&bo, "out beta_used"}};
            for (const auto& [arr, name] : all) call.add(*arr, name);
            LAMINA_CHECK(call.device < 0 || call.device == F.arena_device(), "the arrays are on cuda:",
                         call.device, " but the arena is on cuda:", F.arena_device());
            cols.visits = v.as<void>();
            cols.interaction_len = il.as<const void>();
            cols.last_access = la.as<double>();
            cols.heat = h.as<float>();
            cols.n = static_cast<std::size_t>(n);
            cuda::FleetOutputs out{so.as<float>(), io.as<int64_t>(), ro.as<float>(),
                                   go.as<float>(), bo.as<double>()};
            const uint64_t* nsp = static_cast<const uint64_t*>(ns.data());
            if (nq == 0) return;
            call.run_on(F.arena_device(), stream, [&](void* st) {
              const float* qp = host_q ? static_cast<const float*>(hq.data()) : q.as<const float>();
              F.run(qp, host_q, static_cast<std::size_t>(nq), nsp, now, cols, out, graph, st);
            });
          },
          py::arg("queries"), py::arg("namespaces"), py::arg("now"), py::arg("visits"),
          py::arg("interaction_len"), py::arg("last_access"), py::arg("heat"),
          py::arg("scores"), py::arg("ids"), py::arg("relevance"), py::arg("gamma"),
          py::arg("beta_used"), py::arg("graph"), py::arg("stream"))
      .def("stats", [](const FS& F) {
        const cuda::FleetStats s = F.stats();
        py::dict d;
        d["eager"] = s.eager;
        d["captures"] = s.captures;
        d["updates"] = s.updates;
        d["instantiations"] = s.instantiations;
        d["replays"] = s.replays;
        return d;
      });
#endif
}

}  // namespace lamina::py_detail
