// Bindings for the native feature-hashing embedder.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "lamina/hashing.hpp"

namespace lamina::py_detail {

void register_hashing(py::module_& m) {
  py::class_<HashingEmbedder, std::shared_ptr<HashingEmbedder>>(m, "HashingEmbedder")
      .def(py::init([](long long dim, int ngram_min, int ngram_max) {
             LAMINA_CHECK(dim >= 8, "dim must be >= 8, got ", dim);
             return std::make_shared<HashingEmbedder>(static_cast<std::size_t>(dim), ngram_min,
                                                      ngram_max);
           }),
           py::arg("dim") = 384, py::arg("ngram_min") = 3, py::arg("ngram_max") = 4)
      .def_property_readonly("dim", &HashingEmbedder::dim)
      .def_property_readonly("ngram_min", &HashingEmbedder::ngram_min)
      .def_property_readonly("ngram_max", &HashingEmbedder::ngram_max)
      .def(
          "embed",
          [](const HashingEmbedder& E, const py::list& texts, int threads) {
            std::vector<std::string> v;
            v.reserve(texts.size());
            for (std::size_t i = 0; i < texts.size(); ++i) {
              py::handle t = texts[i];
              if (!py::isinstance<py::str>(t))
                throw TypeError("texts[" + std::to_string(i) + "] must be a str, got " +
                                py::str(py::type::of(t)).cast<std::string>());
              v.push_back(t.cast<std::string>());  // UTF-8
            }
            py::array_t<float> out({v.size(), E.dim()});
            {
              float* o = out.mutable_data();
              py::gil_scoped_release nogil;
              E.embed(v, o, threads);
            }
            return out;
          },
          py::arg("texts"), py::arg("threads") = 0,
          "Embed a list of str -> float32 array (n, dim), unit L2 norm rows.")
      .def_static("fnv1a64", [](const py::bytes& b) { return fnv1a64(std::string(b)); });
}

}  // namespace lamina::py_detail
