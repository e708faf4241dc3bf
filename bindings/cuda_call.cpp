// The shared argument checks of the CUDA twins' bindings (cuda_call.hpp).
#if defined(LAMINA_WITH_CUDA)
#include "cuda_call.hpp"

#include "checks.hpp"

namespace lamina::py_detail {

bool is_f16_code(const CudaArray& a) { return a.kind == 'f' && a.itemsize == 2; }

std::size_t row_stride_elems(const CudaArray& a, const char* name) {
  LAMINA_CHECK(a.shape.size() == 2, name, " must be 2-dimensional (n x dim), got ndim=",
               a.shape.size());
  if (a.strides.empty()) return static_cast<std::size_t>(a.shape[1]);
  LAMINA_CHECK(a.shape[1] <= 1 || a.strides[1] == a.itemsize, name,
               " must have contiguous rows; pass ", name, ".copy()");
  LAMINA_CHECK(a.shape[0] <= 1 || (a.strides[0] % a.itemsize == 0 &&
                                   a.strides[0] / a.itemsize >= a.shape[1]),
               name, " has an unsupported row stride; pass ", name, ".copy()");
  return a.shape[0] <= 1 ? static_cast<std::size_t>(a.shape[1])
                         : static_cast<std::size_t>(a.strides[0] / a.itemsize);
}

std::pair<CudaArray, CudaArray> search_outputs(const py::object& out_scores,
                                               const py::object& out_ids, std::size_t nq,
                                               std::size_t k) {
  CudaArray s = checked_cuda_array(out_scores, "out scores", 2, "f4", "float32", true);
  CudaArray i = checked_cuda_array(out_ids, "out ids", 2, "i8", "int64", true);
  LAMINA_CHECK(static_cast<std::size_t>(s.shape[0]) == nq && static_cast<std::size_t>(s.shape[1]) == k,
               "out scores must have shape (", nq, ", ", k, "), got (", s.shape[0], ", ",
               s.shape[1], ")");
  LAMINA_CHECK(static_cast<std::size_t>(i.shape[0]) == nq && static_cast<std::size_t>(i.shape[1]) == k,
               "out ids must have shape (", nq, ", ", k, "), got (", i.shape[0], ", ", i.shape[1],
               ")");
  return {std::move(s), std::move(i)};
}

cuda::ColKind col_kind(const CudaArray& a, const char* name) {
  if (a.kind == 'f' && a.itemsize == 4) return cuda::ColKind::F32;
  if (a.kind == 'i' && a.itemsize == 4) return cuda::ColKind::I32;
  if (a.kind == 'i' && a.itemsize == 8) return cuda::ColKind::I64;
  throw TypeError(std::string(name) + " must have dtype float32, int32 or int64, got typestr '" +
                  a.typestr + "'; convert explicitly with .astype(...)");
}

CudaArray vec1d(const py::handle& obj, const char* name) {
  CudaArray a = parse_cai(obj, name);
  LAMINA_CHECK(a.shape.size() == 1, name, " must be 1-dimensional, got ndim=", a.shape.size());
  LAMINA_CHECK(a.c_contiguous(), name, " must be contiguous; pass ", name, ".copy()");
  return a;
}

cuda::DeviceParam device_param(const py::object& p, std::size_t m, const char* name, DeviceCall& call) {
  cuda::DeviceParam out;
  if (!has_cai(p)) {
    if (!(py::isinstance<py::float_>(p) || py::isinstance<py::int_>(p)))
      throw TypeError(std::string(name) + " must be a float or a CUDA array of float32/float64");
    out.scalar = p.cast<double>();
    return out;
  }
  CudaArray a = vec1d(p, name);
  LAMINA_CHECK(static_cast<std::size_t>(a.shape[0]) == m, name, " must have one value per updated row (",
               m, "), got ", a.shape[0]);
  call.add(a, name);
  if (a.kind == 'f' && a.itemsize == 4) out.f32 = a.as<const float>();
  else if (a.kind == 'f' && a.itemsize == 8) out.f64 = a.as<const double>();
  else throw TypeError(std::string(name) + " must have dtype float32 or float64, got '" + a.typestr + "'");
  return out;
}

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
