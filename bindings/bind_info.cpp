#include <pybind11/stl.h>

#include "common.hpp"
#include "lamina/parallel.hpp"
#include "lamina/isa.hpp"
#if defined(LAMINA_WITH_CUDA)
#include "lamina_cuda.hpp"
#endif

namespace lamina::py_detail {

void register_exceptions(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ::lamina::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    }
  });
}

void register_info(py::module_& m) {
  m.def("build_info", []() {
    py::dict d;
    d["version"] = LAMINA_VERSION;
#if defined(LAMINA_CXX_COMPILER)
    d["compiler"] = LAMINA_CXX_COMPILER;
#else
    d["compiler"] = "unknown";
#endif
    d["cxx_flags"] = LAMINA_CXX_FLAGS;
    d["cxx_standard"] = __cplusplus;
    d["simd_compiled"] = LAMINA_SIMD_PATHS;
    d["simd_available"] = isa::available();
    d["simd_active"] = isa::name(isa::active());
#if defined(LAMINA_WITH_CUDA)
    d["cuda"] = true;
    d["cuda_architectures"] = LAMINA_CUDA_ARCHS;
    try {
      d["cuda_runtime"] = ::lamina::cuda::runtime_version();
    } catch (const std::exception&) {
      d["cuda_runtime"] = "unavailable";
    }
#else
    d["cuda"] = false;
#endif
    d["num_threads"] = default_num_threads();
    return d;
  }, "Build facts: version, compiler, flags, SIMD paths, CUDA on/off.");
  m.def("has_cuda", []() {
#if defined(LAMINA_WITH_CUDA)
    return true;
#else
    return false;
#endif
  }, "True when this build contains the CUDA backend (a device may still be absent).");
  m.def("cuda_device_count", []() {
#if defined(LAMINA_WITH_CUDA)
    return ::lamina::cuda::device_count();
#else
    return 0;
#endif
  }, "Number of usable CUDA devices (0 without a CUDA build, a driver or a device).");
  m.def("cuda_selftest", []() {
#if defined(LAMINA_WITH_CUDA)
    py::gil_scoped_release nogil;
    ::lamina::cuda::selftest();
#else
    throw std::runtime_error(
        "this lamina build has no CUDA backend; rebuild with "
        "pip install . -Ccmake.define.LAMINA_CUDA=ON");
#endif
  });
  m.def("set_num_threads", [](int n) {
    LAMINA_CHECK(n >= 0, "num_threads must be >= 0 (0 = default), got ", n);
    set_num_threads(n);
  }, py::arg("n"));
  m.def("get_num_threads", &default_num_threads);
}

}  // namespace lamina::py_detail
