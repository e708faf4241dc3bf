// Bindings for the model runtime (lamina/model.hpp). Private: python/lamina/model wraps them.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "kv_cache_binding.hpp"
#include "lamina/model.hpp"
#include "model_args.hpp"

namespace lamina::py_detail {

namespace {

// The model plus the arrays its non-owning pointers point into (kept alive here).
struct PyModel {
  std::unique_ptr<model::Model> m;
  py::list keep;
};

}  // namespace

namespace {

using ModelClass = py::class_<PyModel>;

void register_kv_cache(py::module_& m) {
  py::class_<model::KVCache> cache_cls(m, "KVCache");
  cache_cls
      .def(py::init<int, int, int>(), py::arg("n_layers"), py::arg("n_kv_heads"),
           py::arg("head_dim"))
      .def_property_readonly("nbytes", &model::KVCache::bytes);
  def_kv_cache(
      cache_cls,
      {"Keys of (layer, KV head) after RoPE: float32 [n, head_dim] (a copy).",
       "Values of (layer, KV head): float32 [n, head_dim] (a copy).",
       "Keep only entries `indices` (int64, strictly increasing) of (layer, KV head); frees "
       "the rest."},
      [](const model::KVCache& c, int l, int h, bool keys) {
        const std::size_t n = c.length(l, h), D = c.head_dim();
        py::array_t<float> out({n, D});
        const float* src = keys ? c.keys(l, h) : c.values(l, h);
        std::copy(src, src + n * D, out.mutable_data());
        return out;
      },
      [](const model::KVCache& c) { return model::KVCache(c); });
}

// construction, the settings and forward_hidden
void def_model_setup(ModelClass& model_cls) {
  model_cls
      .def(py::init([](const py::dict& cfg, const py::dict& tensors, const py::object& position) {
             const model::Config c = model_config(cfg);
             auto pm = std::make_unique<PyModel>();
             model::Weights w = model_weights(tensors, c, pm->keep);
             pm->m = std::make_unique<model::Model>(c, std::move(w), position_scaling(position, c));
             return pm;
           }),
           py::arg("config"), py::arg("tensors"), py::arg("position") = py::none(),
           "position: None (plain RoPE) or the Ms-PoE settings as a dict (first_layer, ratio_min, "
           "ratio_max, order 'rank'|'gather'|'normal', window, plain_heads uint8 [n_layers, n_heads] or None).")
      .def_property(
          "q8_prefill", [](const PyModel& pm) { return pm.m->q8_prefill(); },
          [](PyModel& pm, bool on) { pm.m->set_q8_prefill(on); },
          "True (default): the prefill multiplies int8-quantised activations with the packed "
          "blocks (integer GEMM, like q8 decode); False: float32 activations on dequantised "
          "weight panels.")
      .def(
          "forward_hidden",
          [](const PyModel& pm, const py::object& ids, model::KVCache& cache,
             const std::string& logits, int threads, bool q8) {
            py::array a = checked_array<int32_t>(ids, "ids", 1, "int32");
            const model::Logits mode = logits_mode(logits);
            const model::Config& c = pm.m->config();
            const std::size_t T = static_cast<std::size_t>(a.shape(0));
            LAMINA_CHECK(T >= 1, "ids is empty: at least one token is needed");
            float* lp = nullptr;
            py::object out = logits_array(mode, T, c.vocab_size, &lp);
            py::array_t<float> hid({static_cast<std::size_t>(c.n_layers), T,
                                    static_cast<std::size_t>(c.d_model)});
            float* hp = hid.mutable_data();
            const int32_t* p = static_cast<const int32_t*>(a.data());
            {
              py::gil_scoped_release nogil;
              pm.m->forward(p, T, cache, mode, lp, threads, nullptr, q8, hp);
            }
            return py::make_tuple(out, hid);
          },
          py::arg("ids"), py::arg("cache"), py::arg("logits") = "none", py::arg("threads") = 0,
          py::arg("q8_decode") = true,
          "forward() that also returns the residual stream after every layer: (logits or None, "
          "hidden float32 [n_layers, T, d_model]).");
}

// forward and forward_batch
void def_model_forward(ModelClass& model_cls) {
  model_cls
      .def_property_readonly_static("kernel_isa",
                                    [](const py::object&) { return model::Model::kernel_isa(); });
  def_forward(
      model_cls,
      [](const PyModel& pm, const py::object& ids, model::KVCache& cache,
         const std::string& logits, int threads, int record_window, bool q8,
         bool accumulate, const std::string& reduce) {
        py::array a = checked_array<int32_t>(ids, "ids", 1, "int32");
        const model::Logits mode = logits_mode(logits);
        const model::Config& c = pm.m->config();
        const std::size_t T = static_cast<std::size_t>(a.shape(0));
        LAMINA_CHECK(T >= 1, "ids is empty: at least one token is needed");
        LAMINA_CHECK(record_window >= 0 && static_cast<std::size_t>(record_window) <= T,
                     "record_window must be in [0, len(ids)], got ", record_window);
        float* lp = nullptr;
        py::object out = logits_array(mode, T, c.vocab_size, &lp), rec = py::none(), acc = py::none();
        LAMINA_CHECK(reduce == "sum" || reduce == "max",
                     "accumulate_reduce must be 'sum' or 'max', got '", reduce, "'");
        model::AttentionRecord R;
        R.accumulate_max = reduce == "max";
        if (record_window > 0) {
          const std::size_t S = cache.length(0, 0) + T;
          py::array_t<float> o({static_cast<std::size_t>(c.n_layers),
                                static_cast<std::size_t>(c.n_heads),
                                static_cast<std::size_t>(record_window), S});
          R.window = record_window;
          R.out = o.mutable_data();
          rec = o;
        }
        if (accumulate) {
          const std::size_t S = cache.length(0, 0) + T;
          py::array_t<float> o({static_cast<std::size_t>(c.n_layers),
                                static_cast<std::size_t>(c.n_heads), S});
          R.accumulated = o.mutable_data();
          acc = o;
        }
        const int32_t* p = static_cast<const int32_t*>(a.data());
        {
          py::gil_scoped_release nogil;
          pm.m->forward(p, T, cache, mode, lp, threads,
                        record_window > 0 || accumulate ? &R : nullptr, q8);
        }
        return py::make_tuple(out, rec, acc);
      },
      "Runs ids (int32 [T]) through the model after the tokens in cache; returns (logits, "
      "attention, accumulated): logits float32 [vocab] ('last'), [T, vocab] ('all') or None ('none'); "
      "attention float32 [L, H, record_window, S] or None. q8_decode: int8 activations on the "
      "decode (GEMV) path. accumulate_attention: accumulated is (L, H, S) float32, each entry's attention "
      "summed over every query of the call (H2O; accumulate_reduce='max': its maximum, KVzip), else None.");
  model_cls
      .def(
          "forward_batch",
          [](const PyModel& pm, const py::object& ids, const py::list& caches, int threads, bool q8) {
            py::array a = checked_array<int32_t>(ids, "ids", 1, "int32");
            const std::size_t B = static_cast<std::size_t>(a.shape(0));
            LAMINA_CHECK(B >= 1, "ids is empty: at least one sequence is needed");
            LAMINA_CHECK(static_cast<std::size_t>(py::len(caches)) == B, "caches must hold one KVCache per id (",
                         B, "), got ", py::len(caches));
            std::vector<model::KVCache*> cs(B);
            for (std::size_t b = 0; b < B; ++b) {
              if (!py::isinstance<model::KVCache>(caches[b]))
                throw TypeError("caches[" + std::to_string(b) + "] must be a lamina._core.KVCache");
              cs[b] = &caches[b].cast<model::KVCache&>();
            }
            py::array_t<float> out({B, static_cast<std::size_t>(pm.m->config().vocab_size)});
            float* o = out.mutable_data();
            const int32_t* p = static_cast<const int32_t*>(a.data());
            {
              py::gil_scoped_release nogil;
              pm.m->forward_batch(p, B, cs.data(), o, threads, q8);
            }
            return out;
          },
          py::arg("ids"), py::arg("caches"), py::arg("threads") = 0, py::arg("q8_decode") = true,
          "One decode step of B sequences: ids[b] (int32 [B]) appended to caches[b] (B distinct "
          "KVCaches), each attending over its own cache; returns float32 [B, vocab], row b the "
          "next-token logits of sequence b. The matmuls run over the B rows together. ValueError "
          "with Ms-PoE or channel scaling (not implemented batched).");
}

}  // namespace

void register_model(py::module_& m) {
  register_kv_cache(m);
  ModelClass model_cls(m, "LlamaModel");
  def_model_setup(model_cls);
  def_channel_scaling(model_cls,
                      "Single-channel hidden-state scaling: None removes it, else a dict (first_layer, "
                      "last_layer: layers [first, last); channel in [0, d_model); factor; last_tokens: 0 "
                      "scales every position, n >= 1 the last n queries of each call). ValueError on a bad "
                      "setting or a model with Ms-PoE. Set it before the model is shared between threads.");
  def_ratio_of(model_cls);
  def_model_forward(model_cls);
}

}  // namespace lamina::py_detail
