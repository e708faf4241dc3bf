// The GPU twins of bind_kv.cpp: the KV selection (lamina.kv) on device arrays.
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
#include "kv.hpp"
#include "lamina/kv.hpp"

namespace lamina::py_detail {

namespace {

void register_kv_scores_cuda(py::module_& m) {
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
}

void register_kv_rows_cuda(py::module_& m) {
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
}

}  // namespace

void register_kv_cuda(py::module_& m) {
  register_kv_scores_cuda(m);
  register_kv_rows_cuda(m);
}

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
