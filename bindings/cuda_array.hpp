// bindings/cuda_array.hpp — the __cuda_array_interface__ (CAI, v3) boundary of lamina._core.
//
// Parsing and validation need no CUDA and are compiled into every build (so a CPU-only build
// can say precisely what it was given). Rules, mirroring checked_array for numpy:
//  * the interface dict must have shape, typestr, data = (ptr, readonly) and version;
//  * `mask` must be absent or None (masked arrays are not supported);
//  * `strides` None / absent means C-contiguous; given strides must describe a C-contiguous
//    layout (size-1 dimensions ignored), otherwise ValueError naming the fix;
//  * `stream` (v3): None = no synchronisation needed; 1 = legacy default stream, 2 = per-thread
//    default stream, other values are cudaStream_t handles; 0 is disallowed by the spec
//    (ValueError). Consumers make their stream wait for a given producer stream.
//  * dtype must match exactly (TypeError naming the conversion), little-endian or '|'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"

namespace lamina::py_detail {

struct CudaArray {
  std::uintptr_t ptr = 0;
  std::vector<py::ssize_t> shape;
  std::vector<py::ssize_t> strides;  // bytes, as given (empty: C-contiguous by definition)
  std::string typestr;               // as given, e.g. "<f4"
  char kind = 0;                     // 'f', 'i', 'u', 'b', ...
  int itemsize = 0;
  bool readonly = false;
  int version = 0;
  bool has_stream = false;
  std::uintptr_t stream = 0;  // valid when has_stream

  py::ssize_t size() const {
    py::ssize_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  bool c_contiguous() const;
  /// The data pointer as T* (device memory: for launchers only).
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(ptr);
  }
};

/// True when obj exposes __cuda_array_interface__ (CuPy, PyTorch CUDA tensors, Numba, ...).
bool has_cai(const py::handle& obj);

/// Parse and validate obj.__cuda_array_interface__ (see the rules above).
CudaArray parse_cai(const py::handle& obj, const char* name);

/// parse_cai + exact dtype ("f4", "f2", "i8", "u8", "u1"), ndim, C-contiguity and (for outputs)
/// writability. `fix_dtype` names the numpy dtype in messages.
CudaArray checked_cuda_array(const py::handle& obj, const char* name, int ndim,
                             const char* dtype_code, const char* fix_dtype, bool writable);

}  // namespace lamina::py_detail
