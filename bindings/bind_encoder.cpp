// Bindings for the encoder element-wise kernels (used by lamina.embedders.MiniLM).
#include "common.hpp"
#include "lamina/encoder.hpp"

namespace lamina::py_detail {

namespace {

const float* optional_f32(const py::object& obj, const char* name, std::size_t n) {
  if (obj.is_none()) return nullptr;
  py::array a = checked_array<float>(obj, name, 1, "float32");
  LAMINA_CHECK(static_cast<std::size_t>(a.shape(0)) == n, name, " must have length ", n,
               ", got ", a.shape(0));
  return static_cast<const float*>(a.data());
}

}  // namespace

void register_encoder(py::module_& m) {
  m.def(
      "bias_gelu_",
      [](const py::object& x, const py::object& bias, int threads) {
        py::array a = checked_array<float>(x, "x", 2, "float32");
        LAMINA_CHECK(a.writeable(), "x must be writeable (the GELU is applied in place)");
        const std::size_t rows = a.shape(0), cols = a.shape(1);
        const float* b = optional_f32(bias, "bias", cols);
        float* p = static_cast<float*>(a.mutable_data());
        py::gil_scoped_release nogil;
        bias_gelu_inplace(p, rows, cols, b, threads);
      },
      py::arg("x"), py::arg("bias") = py::none(), py::arg("threads") = 0,
      "x <- GELU(x + bias) in place (exact erf GELU); x: float32 [rows x cols], bias: [cols].");
  m.def(
      "add_layer_norm_",
      [](const py::object& x, const py::object& residual, const py::object& weight,
         const py::object& bias, float eps, int threads) {
        py::array a = checked_array<float>(x, "x", 2, "float32");
        LAMINA_CHECK(a.writeable(), "x must be writeable (the LayerNorm is applied in place)");
        const std::size_t rows = a.shape(0), d = a.shape(1);
        const float* res = nullptr;
        if (!residual.is_none()) {
          py::array r = checked_array<float>(residual, "residual", 2, "float32");
          LAMINA_CHECK(r.shape(0) == a.shape(0) && r.shape(1) == a.shape(1),
                       "residual must have the shape of x (", rows, ", ", d, "), got (",
                       r.shape(0), ", ", r.shape(1), ")");
          res = static_cast<const float*>(r.data());
        }
        LAMINA_CHECK(!weight.is_none() && !bias.is_none(), "weight and bias are required");
        const float* w = optional_f32(weight, "weight", d);
        const float* b = optional_f32(bias, "bias", d);
        float* p = static_cast<float*>(a.mutable_data());
        py::gil_scoped_release nogil;
        add_layer_norm_inplace(p, res, rows, d, w, b, eps, threads);
      },
      py::arg("x"), py::arg("residual"), py::arg("weight"), py::arg("bias"), py::arg("eps"),
      py::arg("threads") = 0,
      "x <- LayerNorm(x + residual) * weight + bias in place, per row; float32 [rows x d].");
}

}  // namespace lamina::py_detail
