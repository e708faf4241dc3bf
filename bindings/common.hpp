// bindings/common.hpp — strict, zero-copy numpy boundary helpers for lamina._core.
//
// Inputs must already be numpy arrays of the exact dtype, C-contiguous, with the expected
// number of dimensions; anything else raises TypeError/ValueError naming the fix. No
// conversion happens here (conversions, where offered, are done visibly in Python).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

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

/// Register translators for lamina's exception types (ValueError and IndexError map through
/// their std bases; TypeError needs its own).
void register_exceptions(py::module_& m);

void register_search(py::module_& m);
void register_info(py::module_& m);
void register_cuda(py::module_& m);
void register_hashing(py::module_& m);
void register_kernels(py::module_& m);
void register_kv(py::module_& m);

}  // namespace lamina::py_detail
