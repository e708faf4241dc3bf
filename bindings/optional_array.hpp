// An optional 1-D array argument of a binding (None: absent), read in place (zero-copy).
#pragma once

#include <cstddef>

#include "common.hpp"

namespace lamina::py_detail {

/// The array (checked as checked_array: dtype T, 1-D, C-contiguous; TypeError / ValueError
/// naming `name` and the fix), its data and length; `keep` holds it while the caller reads it.
/// None gives data == nullptr, size == 0.
template <class T>
struct OptionalArray {
  py::array keep;
  const T* data = nullptr;
  std::size_t size = 0;
};

template <class T>
OptionalArray<T> optional_array(const py::object& obj, const char* name, const char* fix_dtype) {
  OptionalArray<T> out;
  if (obj.is_none()) return out;
  out.keep = checked_array<T>(obj, name, 1, fix_dtype);
  out.data = static_cast<const T*>(out.keep.data());
  out.size = static_cast<std::size_t>(out.keep.shape(0));
  return out;
}

}  // namespace lamina::py_detail
