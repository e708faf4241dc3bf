// Bindings of the model's CUDA path (cuda/model.hpp) and of the host-side fp16
// dequantisation it uploads with (lamina/model_f16.hpp). Private: python/lamina/model wraps
// them. `model_dequantize_f16` exists in every build (so the host code is tested without a
// GPU); `CudaLlamaModel` and `CudaKVCache` only in CUDA builds (the _core convention).
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "kv_cache_binding.hpp"
#include "lamina/model.hpp"
#include "lamina/model_f16.hpp"
#include "model_args.hpp"
#if defined(LAMINA_WITH_CUDA)
#include "model.hpp"
#endif

namespace lamina::py_detail {

namespace {

#if defined(LAMINA_WITH_CUDA)

namespace cm = lamina::cuda::model;

struct PyCudaModel {
  std::unique_ptr<cm::DeviceModel> m;
};

[[noreturn]] void not_implemented(const std::string& msg) {
  PyErr_SetString(PyExc_NotImplementedError, msg.c_str());
  throw py::error_already_set();
}

py::array_t<float> head_rows(const cm::DeviceKVCache& c, int l, int h, bool keys) {
  const std::size_t n = c.length(l, h), D = static_cast<std::size_t>(c.head_dim());
  py::array_t<float> out({n, D});
  float* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;  // the copy and conversion; `out` is touched only with the GIL
    if (keys) c.keys(l, h, o);
    else c.values(l, h, o);
  }
  return out;
}

void register_cuda_model(py::module_& m) {
  py::class_<cm::DeviceKVCache> cache_cls(m, "CudaKVCache");
  cache_cls
      .def(py::init<int, int, int>(), py::arg("n_layers"), py::arg("n_kv_heads"), py::arg("head_dim"),
           "An empty KV cache on the current CUDA device (fp16 keys and values per (layer, KV head)).")
      .def_property_readonly("nbytes", &cm::DeviceKVCache::bytes,
                             "Device bytes held (fp16 keys, values, scaled keys; capacity).")
      .def_property_readonly("device", &cm::DeviceKVCache::device);
  def_kv_cache(
      cache_cls,
      {"Keys of (layer, KV head) after RoPE, float32 [n, head_dim] (a host copy of the fp16 store).",
       "Values of (layer, KV head), float32 [n, head_dim] (a host copy).",
       "Keep only entries `indices` (int64, strictly increasing) of (layer, KV head); the "
       "head's device storage is reallocated to exactly those entries."},
      head_rows, [](const cm::DeviceKVCache& c) { return c.clone(); });

  py::class_<PyCudaModel> model_cls(m, "CudaLlamaModel");
  def_channel_scaling(model_cls,
                      "LlamaModel.set_channel_scaling on the device: None removes it, else the same dict; "
                      "the channel's column of the fp16 query / key weights is copied on the device.");
  def_ratio_of(model_cls);
  model_cls
      .def(py::init([](const py::dict& cfg, const py::dict& tensors, const py::object& position) {
             const model::Config c = model_config(cfg);
             py::list keep;  // the arrays the weight view points into, until the upload is done
             const cm::HostWeights w = model_weights(tensors, c, keep);
             const model::PositionScaling pos = position_scaling(position, c);
             auto pm = std::make_unique<PyCudaModel>();
             {
               py::gil_scoped_release nogil;  // dequantisation and upload (the arrays are kept in `keep`)
               pm->m = std::make_unique<cm::DeviceModel>(c, w, pos);
             }
             return pm;
           }),
           py::arg("config"), py::arg("tensors"), py::arg("position") = py::none(),
           "The llama forward on the current CUDA device: every matrix dequantised to fp16 and "
           "uploaded once. Same arguments as LlamaModel.")
      .def_property_readonly("weight_bytes", [](const PyCudaModel& pm) { return pm.m->weight_bytes(); })
      .def_property_readonly("device", [](const PyCudaModel& pm) { return pm.m->device(); });
  def_forward(
      model_cls,
      [](PyCudaModel& pm, const py::object& ids, cm::DeviceKVCache& cache, const std::string& logits,
         int threads, int record_window, bool /*q8_decode*/, bool accumulate,
         const std::string& /*reduce*/) {
        if (accumulate)
          not_implemented(
              "accumulated attention (accumulate_attention: H2O's scores, KVzip's reconstruction) "
              "is not implemented on CUDA; use device='cpu' for h2o and kvzip");
        py::array a = checked_array<int32_t>(ids, "ids", 1, "int32");
        const model::Config& c = pm.m->config();
        const std::size_t T = static_cast<std::size_t>(a.shape(0));
        LAMINA_CHECK(T >= 1, "ids is empty: at least one token is needed");
        LAMINA_CHECK(record_window >= 0 && static_cast<std::size_t>(record_window) <= T,
                     "record_window must be in [0, len(ids)], got ", record_window);
        const model::Logits mode = logits_mode(logits);
        float* lp = nullptr;
        py::object out = logits_array(mode, T, c.vocab_size, &lp), rec = py::none();
        // The attention record (window presses): the device returns the window's queries,
        // the host computes the softmax rows over the cache's keys (lamina/model_f16.hpp).
        const std::size_t w = static_cast<std::size_t>(record_window);
        const std::size_t L = static_cast<std::size_t>(c.n_layers), H = static_cast<std::size_t>(c.n_heads),
                          Hk = static_cast<std::size_t>(c.n_kv_heads), D = static_cast<std::size_t>(c.head_dim);
        std::size_t S = 0;
        float* rp = nullptr;
        if (w > 0) {
          if (pm.m->scaled())
            not_implemented("attention records with Ms-PoE are not implemented on CUDA; use device='cpu'");
          const model::ChannelScaling& cs = pm.m->channel_scaling();
          if (cs.enabled && cs.last_tokens > 0)
            not_implemented("attention records with last-tokens channel scaling are not implemented on "
                            "CUDA; use device='cpu'");
          for (int l = 0; l < c.n_layers; ++l)
            for (int h = 0; h < c.n_kv_heads; ++h)
              LAMINA_CHECK(cache.length(l, h) == cache.length(0, 0),
                           "forward: recording attention needs every head to hold the same number of "
                           "entries (the cache was compacted head-wise)");
          S = cache.length(0, 0) + T;
          py::array_t<float> o({L, H, w, S});
          rp = o.mutable_data();
          rec = o;
        }
        const int32_t* p = static_cast<const int32_t*>(a.data());
        {
          py::gil_scoped_release nogil;
          std::vector<float> queries(w > 0 ? L * w * H * D : 0);
          pm.m->forward(p, T, cache, mode, lp, w > 0 ? queries.data() : nullptr, w);
          if (w > 0) {
            std::vector<float> keys(Hk * S * D);
            for (std::size_t l = 0; l < L; ++l) {
              for (std::size_t h = 0; h < Hk; ++h)
                cache.keys(static_cast<int>(l), static_cast<int>(h), keys.data() + h * S * D);
              model::window_attention_rows(queries.data() + l * w * H * D, w, c.n_heads, c.n_kv_heads,
                                           c.head_dim, keys.data(), S, rp + l * H * w * S, threads);
            }
          }
        }
        return py::make_tuple(out, rec, py::none());
      },
      "LlamaModel.forward's signature on the device: returns (logits, attention, None); q8_decode "
      "is ignored (fp16 weights, float32 activations); record_window > 0 records the last "
      "queries' softmax rows (L, H, record_window, S), computed on the host from the device's "
      "queries and keys with `threads` threads (not with Ms-PoE); accumulate_attention raises "
      "NotImplementedError.");
}

#endif  // LAMINA_WITH_CUDA

}  // namespace

void register_model_cuda(py::module_& m) {
  m.def(
      "model_dequantize_f16",
      [](const std::string& type_name, const py::object& data) {
        py::list keep;
        const model::Matrix s = tensor_matrix(type_name, data, "data", keep);
        py::array out(py::dtype("float16"), std::vector<py::ssize_t>{static_cast<py::ssize_t>(s.rows),
                                                                     static_cast<py::ssize_t>(s.cols)});
        uint16_t* o = static_cast<uint16_t*>(out.mutable_data());
        {
          py::gil_scoped_release nogil;  // `keep` holds the array the view points into
          model::dequantize_f16(s.type, s.data, s.rows, s.cols, o);
        }
        return out;
      },
      py::arg("type"), py::arg("data"),
      "A GGUF matrix (type name, its stored rows: float32 / float16 (rows, cols) or uint8 "
      "blocks (rows, row bytes)) as float16 (rows, cols): the weights the CUDA path uploads.");
  m.def(
      "model_window_attention_rows",
      [](const py::object& q, const py::object& keys, int threads) {
        py::array qa = checked_array<float>(q, "q", 3, "float32");
        py::array ka = checked_array<float>(keys, "keys", 3, "float32");
        const std::size_t w = static_cast<std::size_t>(qa.shape(0)), S = static_cast<std::size_t>(ka.shape(1));
        const int H = static_cast<int>(qa.shape(1)), Hk = static_cast<int>(ka.shape(0)), D = static_cast<int>(qa.shape(2));
        LAMINA_CHECK(ka.shape(2) == D, "keys must have the queries' head_dim (", D, "), got ", ka.shape(2));
        py::array_t<float> out({static_cast<std::size_t>(H), w, S});
        const float* qp = static_cast<const float*>(qa.data());
        const float* kp = static_cast<const float*>(ka.data());
        float* o = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          model::window_attention_rows(qp, w, H, Hk, D, kp, S, o, threads);
        }
        return out;
      },
      py::arg("q"), py::arg("keys"), py::arg("threads") = 0,
      "One layer's attention record from a window's queries q (w, H, D) and the keys (Hk, S, D): "
      "(H, w, S) float32, row i the causal softmax over the first S - w + i + 1 entries (the CUDA "
      "path's record, computed on the host).");
#if defined(LAMINA_WITH_CUDA)
  register_cuda_model(m);
#endif
}

}  // namespace lamina::py_detail
