// Bindings of the CUDA backend's basics: __cuda_array_interface__ parsing (every build) and,
// in CUDA builds, the device of a pointer and the top-k limit; then the GPU twins, each in the
// file of its concept (bind_<concept>_cuda.cpp, beside bind_<concept>.cpp). Device selection and
// output allocation (CuPy / PyTorch) happen in python/lamina/_device.py.
#include <pybind11/stl.h>

#include "common.hpp"
#include "cuda_array.hpp"
#if defined(LAMINA_WITH_CUDA)
#include "cuda_call.hpp"
#include "lamina_cuda.hpp"
#include "topk.hpp"
#endif

namespace lamina::py_detail {

namespace {

py::dict cai_info(const CudaArray& a) {
  py::dict d;
  d["ptr"] = py::int_(a.ptr);
  d["shape"] = py::tuple(py::cast(a.shape));
  d["strides"] = a.strides.empty() ? py::object(py::none()) : py::object(py::tuple(py::cast(a.strides)));
  d["typestr"] = a.typestr;
  d["itemsize"] = a.itemsize;
  d["readonly"] = a.readonly;
  d["version"] = a.version;
  d["stream"] = a.has_stream ? py::object(py::int_(a.stream)) : py::object(py::none());
  d["c_contiguous"] = a.c_contiguous();
  return d;
}

}  // namespace

void register_cuda(py::module_& m) {
  m.def("_cuda_array_info",
        [](const py::object& obj, const std::string& name) { return cai_info(parse_cai(obj, name.c_str())); },
        py::arg("obj"), py::arg("name") = "array",
        "Parsed, validated __cuda_array_interface__ of obj (no device access).");
  m.def("_check_cuda_array",
        [](const py::object& obj, const std::string& name, int ndim, const std::string& code,
           const std::string& fix, bool writable) {
          return cai_info(checked_cuda_array(obj, name.c_str(), ndim, code.c_str(), fix.c_str(), writable));
        },
        py::arg("obj"), py::arg("name"), py::arg("ndim"), py::arg("dtype_code"),
        py::arg("fix_dtype"), py::arg("writable") = false);

#if defined(LAMINA_WITH_CUDA)
  m.def("cuda_pointer_device", [](std::uintptr_t ptr) {
    return cuda::pointer_device(reinterpret_cast<const void*>(ptr));
  });
  m.def("cuda_max_k", []() { return cuda::kMaxK; });
  register_search_cuda(m);
  register_kernels_cuda(m);
  register_kv_cuda(m);
  register_fleet_cuda(m);
#endif
}

}  // namespace lamina::py_detail
