// The Python-side arguments of the model bindings (see model_args.hpp).
#include "model_args.hpp"

#include <type_traits>
#include <utility>

namespace lamina::py_detail {

using model::QType;

model::Config model_config(const py::dict& cfg) {
  model::Config c;
  c.n_layers = cfg["n_layers"].cast<int>();
  c.d_model = cfg["d_model"].cast<int>();
  c.d_ff = cfg["d_ff"].cast<int>();
  c.n_heads = cfg["n_heads"].cast<int>();
  c.n_kv_heads = cfg["n_kv_heads"].cast<int>();
  c.head_dim = cfg["head_dim"].cast<int>();
  c.vocab_size = cfg["vocab_size"].cast<int>();
  c.rope_base = cfg["rope_base"].cast<float>();
  c.rms_eps = cfg["rms_eps"].cast<float>();
  return c;
}

model::Matrix tensor_matrix(const std::string& type_name, const py::handle& obj,
                            const std::string& name, py::list& keep) {
  const QType t = model::qtype_from_name(type_name);
  py::array a;
  model::Matrix m;
  m.type = t;
  if (t == QType::F32) {
    a = checked_array<float>(obj, name.c_str(), 2, "float32");
  } else if (t == QType::F16) {
    if (!py::isinstance<py::array>(obj) ||
        !py::reinterpret_borrow<py::array>(obj).dtype().is(py::dtype("float16")))
      throw TypeError(name + " (F16) must be a float16 numpy array");
    a = py::reinterpret_borrow<py::array>(obj);
    LAMINA_CHECK(a.ndim() == 2 && (a.flags() & py::array::c_style), name,
                 " must be a C-contiguous 2-D array");
  } else {
    a = checked_array<uint8_t>(obj, name.c_str(), 2, "uint8");
  }
  m.rows = static_cast<std::size_t>(a.shape(0));
  if (t == QType::F32 || t == QType::F16) {
    m.cols = static_cast<std::size_t>(a.shape(1));
  } else {
    const std::size_t per32 = model::row_bytes(t, 32);
    LAMINA_CHECK(static_cast<std::size_t>(a.shape(1)) % per32 == 0, name, ": ", a.shape(1),
                 " bytes per row is not a whole number of ", model::qtype_name(t), " blocks");
    m.cols = static_cast<std::size_t>(a.shape(1)) / per32 * 32;
  }
  m.data = a.data();
  keep.append(a);
  return m;
}

model::Matrix tensor_matrix(const py::dict& tensors, const std::string& name, py::list& keep) {
  LAMINA_CHECK(tensors.contains(name), "tensor ", name, " is missing");
  py::tuple tv = tensors[py::str(name)].cast<py::tuple>();
  LAMINA_CHECK(tv.size() == 2, "tensor ", name, ": expected a (type name, array) pair");
  return tensor_matrix(tv[0].cast<std::string>(), tv[1], name, keep);
}

const float* tensor_vector(const py::dict& tensors, const std::string& name, std::size_t n,
                           py::list& keep) {
  LAMINA_CHECK(tensors.contains(name), "tensor ", name, " is missing");
  py::tuple tv = tensors[py::str(name)].cast<py::tuple>();
  LAMINA_CHECK(tv.size() == 2 && tv[0].cast<std::string>() == "F32", "tensor ", name,
               " must be F32");
  py::array a = checked_array<float>(tv[1], name.c_str(), 1, "float32");
  LAMINA_CHECK(static_cast<std::size_t>(a.shape(0)) == n, name, " has ", a.shape(0),
               " elements, expected ", n);
  keep.append(a);
  return static_cast<const float*>(a.data());
}

model::Weights model_weights(const py::dict& tensors, const model::Config& c, py::list& keep) {
  model::Weights w;
  const std::size_t d = static_cast<std::size_t>(std::max(c.d_model, 0));
  w.token_embd = tensor_matrix(tensors, "token_embd.weight", keep);
  w.output = tensors.contains("output.weight") ? tensor_matrix(tensors, "output.weight", keep)
                                              : w.token_embd;
  w.output_norm = tensor_vector(tensors, "output_norm.weight", d, keep);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    model::Layer L;
    L.attn_norm = tensor_vector(tensors, p + "attn_norm.weight", d, keep);
    L.ffn_norm = tensor_vector(tensors, p + "ffn_norm.weight", d, keep);
    L.wq = tensor_matrix(tensors, p + "attn_q.weight", keep);
    L.wk = tensor_matrix(tensors, p + "attn_k.weight", keep);
    L.wv = tensor_matrix(tensors, p + "attn_v.weight", keep);
    L.wo = tensor_matrix(tensors, p + "attn_output.weight", keep);
    L.w_gate = tensor_matrix(tensors, p + "ffn_gate.weight", keep);
    L.w_up = tensor_matrix(tensors, p + "ffn_up.weight", keep);
    L.w_down = tensor_matrix(tensors, p + "ffn_down.weight", keep);
    w.layers.push_back(L);
  }
  return w;
}

model::PositionScaling position_scaling(const py::object& o, const model::Config& c) {
  model::PositionScaling p;
  if (o.is_none()) return p;
  const py::dict d = o.cast<py::dict>();
  p.enabled = true;
  p.first_layer = d["first_layer"].cast<int>();
  p.ratio_min = d["ratio_min"].cast<float>();
  p.ratio_max = d["ratio_max"].cast<float>();
  p.window = d["window"].cast<int>();
  const std::string order = d["order"].cast<std::string>();
  if (order == "rank") p.order = model::RatioOrder::Rank;
  else if (order == "gather") p.order = model::RatioOrder::Gather;
  else if (order == "normal") p.order = model::RatioOrder::Normal;
  else throw ValueError("position order must be 'rank', 'gather' or 'normal', got '" + order + "'");
  if (d.contains("plain_heads") && !d["plain_heads"].is_none()) {
    py::array a = checked_array<uint8_t>(d["plain_heads"], "plain_heads", 2, "uint8");
    LAMINA_CHECK(a.shape(0) == c.n_layers && a.shape(1) == c.n_heads,
                 "plain_heads must have shape (n_layers, n_heads) = (", c.n_layers, ", ",
                 c.n_heads, ")");
    const uint8_t* f = static_cast<const uint8_t*>(a.data());
    p.plain_heads.assign(f, f + a.shape(0) * a.shape(1));
  }
  return p;
}

namespace {
/// The Python dict keys of a ChannelScaling, each with its field: visit(key, cs.field) per
/// field (CS: ChannelScaling or const ChannelScaling).
template <class CS, class Visit>
void channel_scaling_fields(CS& cs, Visit visit) {
  visit("first_layer", cs.first_layer);
  visit("last_layer", cs.last_layer);
  visit("channel", cs.channel);
  visit("factor", cs.factor);
  visit("last_tokens", cs.last_tokens);
}
}  // namespace

model::ChannelScaling channel_scaling(const py::object& o) {
  model::ChannelScaling cs;
  if (o.is_none()) return cs;
  const py::dict d = o.cast<py::dict>();
  channel_scaling_fields(cs, [&](const char* key, auto&) {
    LAMINA_CHECK(d.contains(key), "channel scaling: missing key '", key, "'");
  });
  cs.enabled = true;
  channel_scaling_fields(cs, [&](const char* key, auto& field) {
    field = d[key].cast<std::remove_reference_t<decltype(field)>>();
  });
  return cs;
}

py::object channel_scaling_dict(const model::ChannelScaling& cs) {
  if (!cs.enabled) return py::none();
  py::dict d;
  channel_scaling_fields(cs, [&](const char* key, const auto& field) { d[key] = field; });
  return std::move(d);
}

model::Logits logits_mode(const std::string& s) {
  if (s == "none") return model::Logits::None;
  if (s == "last") return model::Logits::Last;
  if (s == "all") return model::Logits::All;
  throw ValueError("logits must be 'none', 'last' or 'all', got '" + s + "'");
}

py::object logits_array(model::Logits mode, std::size_t T, int vocab_size, float** data) {
  *data = nullptr;
  if (mode == model::Logits::None) return py::none();
  const std::size_t V = static_cast<std::size_t>(vocab_size);
  py::array_t<float> o = mode == model::Logits::Last ? py::array_t<float>(V) : py::array_t<float>({T, V});
  *data = o.mutable_data();
  return std::move(o);
}

}  // namespace lamina::py_detail
