// cuda_call.hpp — internal to the bindings of the CUDA twins (bind_*_cuda.cpp): how a binding
// validates device arrays and launches. Every launch goes through DeviceCall::launch / run_on:
// the GIL released, the device made current, the execution stream waiting for every producer
// stream the arrays name. CUDA builds only.
#pragma once
#if defined(LAMINA_WITH_CUDA)

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "cuda_array.hpp"
#include "kernels.hpp"
#include "lamina_cuda.hpp"

namespace lamina::py_detail {

namespace py = pybind11;

inline void* as_stream(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

// Device of a set of arrays (all must agree) and the producer streams to wait for; runs the
// launch.
struct DeviceCall {
  int device = -1;
  std::string first;
  std::vector<std::uintptr_t> producers;

  void add(const CudaArray& a, const char* name) {
    // each producer stream once (every array of a CuPy call names the same current stream)
    if (a.has_stream && std::find(producers.begin(), producers.end(), a.stream) == producers.end())
      producers.push_back(a.stream);
    if (a.size() == 0) return;
    const int dev = cuda::pointer_device(reinterpret_cast<const void*>(a.ptr));
    if (device < 0) {
      device = dev;
      first = name;
    } else {
      LAMINA_CHECK(dev == device, name, " is on cuda:", dev, " but ", first, " is on cuda:",
                   device, "; pass all arrays on one device (lamina never copies between devices)");
    }
  }

  // The launch tail: with the GIL released and `dev` current, the execution stream waits for
  // the producers, then f(stream) runs (its result is returned).
  template <class F>
  auto run_on(int dev, std::uintptr_t stream, F&& f) const {
    py::gil_scoped_release nogil;
    cuda::DeviceGuard guard(dev);
    for (std::uintptr_t p : producers) cuda::stream_wait(as_stream(stream), as_stream(p));
    return f(as_stream(stream));
  }
  // The same on the arrays' device; when no array has elements (device < 0) empty() runs
  // instead, with the GIL released and no device made current.
  template <class F, class E>
  auto launch(std::uintptr_t stream, F&& f, E&& empty) const {
    if (device < 0) {
      py::gil_scoped_release nogil;
      return empty();
    }
    return run_on(device, stream, std::forward<F>(f));
  }
  template <class F>
  void launch(std::uintptr_t stream, F&& f) const {
    launch(stream, std::forward<F>(f), [] {});
  }
};

bool is_f16_code(const CudaArray& a);
// 2-D rows with unit inner stride (row padding allowed); returns the row stride in elements.
std::size_t row_stride_elems(const CudaArray& a, const char* name);
// The caller's device outputs of a search: scores (nq, k) float32 and ids (nq, k) int64.
std::pair<CudaArray, CudaArray> search_outputs(const py::object& out_scores,
                                               const py::object& out_ids, std::size_t nq,
                                               std::size_t k);
// The column kind of a device fleet column (float32, int32 or int64; TypeError otherwise).
cuda::ColKind col_kind(const CudaArray& a, const char* name);
// A 1-D contiguous device array.
CudaArray vec1d(const py::handle& obj, const char* name);
// Scalar or per-row (device float32 / float64, length m) parameter.
cuda::DeviceParam device_param(const py::object& p, std::size_t m, const char* name, DeviceCall& call);

// The GPU twins, one a concept (registered by register_cuda in this order).
void register_search_cuda(py::module_& m);   // bind_search_cuda.cpp: top-k and the arena
void register_kernels_cuda(py::module_& m);  // bind_kernels_cuda.cpp
void register_kv_cuda(py::module_& m);       // bind_kv_cuda.cpp
void register_fleet_cuda(py::module_& m);    // bind_fleet_cuda.cpp

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
