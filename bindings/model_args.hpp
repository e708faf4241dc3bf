// bindings/model_args.hpp — what the CPU model's bindings (bind_model.cpp) and the CUDA
// model's (bind_model_cuda.cpp) read from Python the same way: the config dict, the GGUF
// tensors dict as the core's weight view, the Ms-PoE and channel-scaling dicts of
// python/lamina/model (position.py, calibration.py) and the logits mode.
#pragma once

#include <string>
#include <utility>

#include "common.hpp"
#include "lamina/model.hpp"

namespace lamina::py_detail {

/// Config from the dict of python/lamina/model/weights.py (n_layers, d_model, d_ff, n_heads,
/// n_kv_heads, head_dim, vocab_size, rope_base, rms_eps).
model::Config model_config(const py::dict& cfg);

/// One GGUF tensor of `tensors` ({name: (type name, array)}) as the core's Matrix view: F32
/// float32 (rows, cols), F16 float16 (rows, cols) or a block type's uint8 (rows, row bytes).
/// The array is appended to `keep` (the view points into it). ValueError / TypeError naming
/// the tensor.
model::Matrix tensor_matrix(const py::dict& tensors, const std::string& name, py::list& keep);
/// Same, for a given (type name, array) pair.
model::Matrix tensor_matrix(const std::string& type_name, const py::handle& array,
                            const std::string& name, py::list& keep);
/// An F32 vector tensor of n elements (norm weights), kept in `keep`.
const float* tensor_vector(const py::dict& tensors, const std::string& name, std::size_t n,
                           py::list& keep);
/// Every weight of a llama model (token_embd, output or the tied embedding, output_norm,
/// blk.i.*) as the core's Weights view; the arrays are kept in `keep`.
model::Weights model_weights(const py::dict& tensors, const model::Config& c, py::list& keep);

/// Ms-PoE settings from the dict python/lamina/model/position.py builds (None: plain RoPE).
model::PositionScaling position_scaling(const py::object& o, const model::Config& c);
/// Channel scaling from the dict python/lamina/model/calibration.py builds (first_layer,
/// last_layer, channel, factor, last_tokens; None: disabled). ValueError for a missing key.
model::ChannelScaling channel_scaling(const py::object& o);
/// The dict channel_scaling() reads (None when disabled).
py::object channel_scaling_dict(const model::ChannelScaling& cs);

/// "none" | "last" | "all" (ValueError otherwise).
model::Logits logits_mode(const std::string& s);
/// The logits array a forward of T tokens fills in `mode`: float32 [vocab_size] for Last,
/// [T, vocab_size] for All, None for None; `*data` is set to its buffer (nullptr for None).
py::object logits_array(model::Logits mode, std::size_t T, int vocab_size, float** data);

/// forward(ids, cache, logits="last", threads=0, record_window=0, q8_decode=True,
/// accumulate_attention=False, accumulate_reduce="sum") on a model class: the one Python
/// signature of the CPU and CUDA models' forward, implemented by `f`, documented by `doc`.
template <class PyM, class F>
void def_forward(py::class_<PyM>& cls, F&& f, const char* doc) {
  cls.def("forward", std::forward<F>(f), py::arg("ids"), py::arg("cache"),
          py::arg("logits") = "last", py::arg("threads") = 0, py::arg("record_window") = 0,
          py::arg("q8_decode") = true, py::arg("accumulate_attention") = false,
          py::arg("accumulate_reduce") = "sum", doc);
}

/// set_channel_scaling / channel_scaling on a model class (PyM: the wrapper whose `m` is the
/// CPU or CUDA model); `set_doc` documents the setter.
template <class PyM>
void def_channel_scaling(py::class_<PyM>& cls, const char* set_doc) {
  cls.def(
         "set_channel_scaling",
         [](PyM& pm, const py::object& o) {
           const model::ChannelScaling cs = channel_scaling(o);
           py::gil_scoped_release nogil;
           pm.m->set_channel_scaling(cs);
         },
         py::arg("scaling"), set_doc)
      .def_property_readonly(
          "channel_scaling", [](const PyM& pm) -> py::object { return channel_scaling_dict(pm.m->channel_scaling()); },
          "The channel scaling as set (a dict), or None.");
}

/// ratio_of(index) on a model class: the Ms-PoE ratio r_i of ratio index i (IndexError outside
/// [0, n_kv_heads)).
template <class PyM>
void def_ratio_of(py::class_<PyM>& cls) {
  cls.def(
      "ratio_of",
      [](const PyM& pm, int i) {
        LAMINA_CHECK_INDEX(i >= 0 && i < pm.m->config().n_kv_heads, "ratio index ", i, " outside [0, n_kv_heads)");
        return pm.m->ratio_of(i);
      },
      py::arg("index"), "The Ms-PoE ratio r_i of ratio index i.");
}

}  // namespace lamina::py_detail
