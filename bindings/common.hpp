// bindings/common.hpp — strict, zero-copy numpy boundary helpers for lamina._core.
//
// Inputs must already be numpy arrays of the exact dtype, C-contiguous, with the expected
// number of dimensions; anything else raises TypeError/ValueError naming the fix. No
// conversion happens here (conversions, where offered, are done visibly in Python).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lamina/arena.hpp"
#include "lamina/common.hpp"

namespace lamina::py_detail {

namespace py = pybind11;

inline std::string dtype_str(const py::dtype& dt) { return py::str(dt).cast<std::string>(); }

/// Returns obj as a numpy array after checking its dtype T, ndim and C-contiguity.
template <class T>
py::array checked_array(const py::handle& obj, const char* name, int ndim,
                        const char* fix_dtype) {
  if (!py::isinstance<py::array>(obj))
    throw ::lamina::TypeError(std::string(name) + " must be a numpy.ndarray of dtype " +
                              fix_dtype + ", got " +
                              py::str(py::type::of(obj)).cast<std::string>() +
                              "; use numpy.asarray(" + name + ", dtype=numpy." + fix_dtype + ")");
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>()))
    throw ::lamina::TypeError(std::string(name) + " must have dtype " + fix_dtype + ", got " +
                              dtype_str(a.dtype()) + "; convert explicitly with " + name +
                              ".astype(numpy." + fix_dtype + ")");
  if (a.ndim() != ndim)
    throw ::lamina::ValueError(std::string(name) + " must be " + std::to_string(ndim) +
                               "-dimensional, got shape with ndim=" + std::to_string(a.ndim()));
  if (!(a.flags() & py::array::c_style))
    throw ::lamina::ValueError(std::string(name) +
                               " must be C-contiguous; pass numpy.ascontiguousarray(" + name +
                               ")");
  return a;
}

/// Slot handles: int64, 1-D, C-contiguous.
inline py::array check_slots(const py::handle& obj) {
  return checked_array<int64_t>(obj, "slots", 1, "int64");
}

/// contains / namespaces_of / layers_of: the same per-slot column reads for every arena type
/// (host VectorArena and the CUDA arena, whose bookkeeping columns live on the host).
template <class Arena, class Cls>
void def_slot_columns(Cls& cls) {
  cls.def("contains",
          [](const Arena& A, const py::object& slots) {
            py::array s = check_slots(slots);
            py::array_t<bool> out(s.shape(0));
            A.contains(static_cast<const int64_t*>(s.data()), s.shape(0),
                       reinterpret_cast<uint8_t*>(out.mutable_data()));
            return out;
          })
      .def("namespaces_of",
           [](const Arena& A, const py::object& slots) {
             py::array s = check_slots(slots);
             py::array_t<uint64_t> out(s.shape(0));
             A.namespaces_of(static_cast<const int64_t*>(s.data()), s.shape(0), out.mutable_data());
             return out;
           })
      .def("layers_of", [](const Arena& A, const py::object& slots) {
        py::array s = check_slots(slots);
        py::array_t<uint8_t> out(s.shape(0));
        A.layers_of(static_cast<const int64_t*>(s.data()), s.shape(0), out.mutable_data());
        return out;
      });
}

/// numpy's name of an arena's row dtype.
inline const char* dtype_name(DType t) { return t == DType::F16 ? "float16" : "float32"; }

/// remove(slots) for every arena type; `extra` (the CUDA arena's stream) follows the slots in
/// Arena::remove. The GIL is released around the removal.
template <class Arena, class... Extra>
void remove_slots(Arena& A, const py::object& slots, Extra... extra) {
  py::array s = check_slots(slots);
  const int64_t* p = static_cast<const int64_t*>(s.data());
  const std::size_t n = s.shape(0);
  py::gil_scoped_release nogil;
  A.remove(p, n, extra...);
}

/// get(slots) for every arena type: the rows of `slots` as a new [n, dim] array of the arena's
/// dtype; `extra` (the CUDA arena's stream) follows the output in Arena::get.
template <class Arena, class... Extra>
py::array get_slots(const Arena& A, const py::object& slots, Extra... extra) {
  py::array s = check_slots(slots);
  const std::size_t n = s.shape(0);
  py::array out(py::dtype(dtype_name(A.dtype())),
                std::vector<py::ssize_t>{(py::ssize_t)n, (py::ssize_t)A.dim()});
  {
    const int64_t* p = static_cast<const int64_t*>(s.data());
    void* o = out.mutable_data();
    py::gil_scoped_release nogil;
    A.get(p, n, o, extra...);
  }
  return out;
}

/// The members every arena type shares (host VectorArena and the CUDA arena): shape and
/// capacity properties, reserve, namespace_size and the bookkeeping columns.
template <class Arena, class Cls>
void def_arena_common(Cls& cls) {
  def_slot_columns<Arena>(cls);
  cls.def_property_readonly("dim", &Arena::dim)
      .def_property_readonly("dtype",
                             [](const Arena& A) { return dtype_name(A.dtype()); })
      .def_property_readonly("capacity", &Arena::capacity)
      .def_property_readonly("high_water", &Arena::high_water)
      .def_property_readonly("stride", &Arena::stride)
      .def_property_readonly("codec",
                             [](const Arena& A) -> py::object {
                               if (A.codec() == Codec::None) return py::none();
                               return py::str(codec_name(A.codec()));
                             })
      .def_property_readonly("code_bytes", &Arena::code_stride)
      .def("__len__", &Arena::size)
      .def("reserve",
           [](Arena& A, long long c) {
             LAMINA_CHECK(c >= 0, "capacity must be >= 0");
             py::gil_scoped_release nogil;
             A.reserve(c);
           })
      .def("namespace_size", [](const Arena& A, uint64_t ns) { return A.namespace_size(ns); })
      .def("columns", [](const Arena& A) {
        std::vector<uint64_t> ns;
        std::vector<uint8_t> layers, live;
        A.columns(ns, layers, live);
        py::array_t<uint64_t> a(ns.size());
        py::array_t<uint8_t> b(layers.size());
        py::array_t<bool> c(live.size());
        std::copy(ns.begin(), ns.end(), a.mutable_data());
        std::copy(layers.begin(), layers.end(), b.mutable_data());
        for (std::size_t i = 0; i < live.size(); ++i) c.mutable_data()[i] = live[i] != 0;
        return py::make_tuple(a, b, c);
      });
}

/// Register translators for lamina's exception types (ValueError and IndexError map through
/// their std bases; TypeError needs its own).
void register_exceptions(py::module_& m);

void register_search(py::module_& m);
void register_info(py::module_& m);
void register_cuda(py::module_& m);
void register_hashing(py::module_& m);
void register_kernels(py::module_& m);
void register_kv(py::module_& m);
void register_encoder(py::module_& m);
void register_lexical(py::module_& m);
void register_model(py::module_& m);
void register_model_cuda(py::module_& m);
void register_gc(py::module_& m);
void register_coverage(py::module_& m);

}  // namespace lamina::py_detail
