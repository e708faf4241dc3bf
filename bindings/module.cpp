// lamina._core — the private compiled module; the public API lives in python/lamina.
#include <pybind11/pybind11.h>

#include "common.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "lamina native core (private; use the lamina package)";
  lamina::py_detail::register_exceptions(m);
  lamina::py_detail::register_info(m);
  lamina::py_detail::register_search(m);
  lamina::py_detail::register_cuda(m);
  lamina::py_detail::register_hashing(m);
  lamina::py_detail::register_kernels(m);
  lamina::py_detail::register_kv(m);
  lamina::py_detail::register_encoder(m);
  lamina::py_detail::register_lexical(m);
  lamina::py_detail::register_model(m);
  lamina::py_detail::register_model_cuda(m);
  lamina::py_detail::register_gc(m);
  lamina::py_detail::register_coverage(m);
}
