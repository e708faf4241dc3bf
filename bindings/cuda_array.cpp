#include "cuda_array.hpp"

namespace lamina::py_detail {

bool CudaArray::c_contiguous() const {
  if (strides.empty() || size() == 0) return true;
  py::ssize_t expect = itemsize;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

bool has_cai(const py::handle& obj) {
  return PyObject_HasAttrString(obj.ptr(), "__cuda_array_interface__") == 1;
}

namespace {
[[noreturn]] void bad(const char* name, const std::string& what) {
  throw ValueError(std::string(name) + ".__cuda_array_interface__ " + what);
}
}  // namespace

CudaArray parse_cai(const py::handle& obj, const char* name) {
  if (!has_cai(obj))
    throw TypeError(std::string(name) + " must expose __cuda_array_interface__ (a CuPy array or "
                    "a PyTorch CUDA tensor), got " + py::str(py::type::of(obj)).cast<std::string>());
  py::object iface = obj.attr("__cuda_array_interface__");
  if (!py::isinstance<py::dict>(iface)) bad(name, "is not a dict");
  py::dict d = iface;
  CudaArray a;
  for (const char* key : {"shape", "typestr", "data", "version"})
    if (!d.contains(key)) bad(name, std::string("has no '") + key + "' entry");

  py::object ver = d["version"];
  if (!py::isinstance<py::int_>(ver)) bad(name, "'version' must be an int");
  a.version = ver.cast<int>();
  if (a.version < 0) bad(name, "'version' must be >= 0");

  py::object shp = d["shape"];
  if (!py::isinstance<py::tuple>(shp)) bad(name, "'shape' must be a tuple of ints");
  for (auto s : py::reinterpret_borrow<py::tuple>(shp)) {
    if (!py::isinstance<py::int_>(s)) bad(name, "'shape' must be a tuple of ints");
    const long long v = s.cast<long long>();
    if (v < 0) bad(name, "'shape' has a negative extent");
    a.shape.push_back(static_cast<py::ssize_t>(v));
  }

  py::object ts = d["typestr"];
  if (!py::isinstance<py::str>(ts)) bad(name, "'typestr' must be a str");
  a.typestr = ts.cast<std::string>();
  if (a.typestr.size() < 3 || std::string("<>|=").find(a.typestr[0]) == std::string::npos)
    bad(name, "'typestr' '" + a.typestr + "' is not a numpy type string");
  a.kind = a.typestr[1];
  try {
    a.itemsize = std::stoi(a.typestr.substr(2));
  } catch (const std::exception&) {
    bad(name, "'typestr' '" + a.typestr + "' is not a numpy type string");
  }
  if (a.itemsize <= 0) bad(name, "'typestr' '" + a.typestr + "' has a bad item size");
  if (a.typestr[0] == '>' && a.itemsize > 1)
    throw TypeError(std::string(name) + " is big-endian (" + a.typestr +
                    "); only little-endian device arrays are supported");

  py::object data = d["data"];
  if (!py::isinstance<py::tuple>(data) || py::len(data) != 2)
    bad(name, "'data' must be a (pointer, read_only) tuple");
  py::tuple dt = data;
  if (!py::isinstance<py::int_>(dt[0])) bad(name, "'data' pointer must be an int");
  py::int_ p = dt[0];
  if (p < py::int_(0)) bad(name, "'data' pointer must be >= 0");
  a.ptr = p.cast<std::uintptr_t>();
  a.readonly = py::bool_(dt[1]).cast<bool>();
  if (a.ptr == 0 && a.size() > 0) bad(name, "has a null data pointer for a non-empty array");

  if (d.contains("mask") && !d["mask"].is_none())
    throw ValueError(std::string(name) + " is a masked device array; masks are not supported");

  if (d.contains("strides") && !d["strides"].is_none()) {
    py::object st = d["strides"];
    if (!py::isinstance<py::tuple>(st) || py::len(st) != a.shape.size())
      bad(name, "'strides' must be None or a tuple with one int per dimension");
    for (auto s : py::reinterpret_borrow<py::tuple>(st)) {
      if (!py::isinstance<py::int_>(s)) bad(name, "'strides' must be a tuple of ints");
      a.strides.push_back(s.cast<py::ssize_t>());
    }
  }

  if (a.version >= 3 && d.contains("stream") && !d["stream"].is_none()) {
    py::object s = d["stream"];
    if (!py::isinstance<py::int_>(s)) bad(name, "'stream' must be None or an int");
    py::int_ si = s;
    if (si <= py::int_(0))
      bad(name, "'stream' must be None, 1 (legacy default), 2 (per-thread default) or a stream "
                "handle; 0 is disallowed by the CUDA Array Interface v3");
    a.has_stream = true;
    a.stream = si.cast<std::uintptr_t>();
  }
  return a;
}

CudaArray checked_cuda_array(const py::handle& obj, const char* name, int ndim,
                             const char* dtype_code, const char* fix_dtype, bool writable) {
  CudaArray a = parse_cai(obj, name);
  const std::string have = std::string(1, a.kind) + std::to_string(a.itemsize);
  if (have != dtype_code)
    throw TypeError(std::string(name) + " must have dtype " + fix_dtype + ", got typestr '" +
                    a.typestr + "'; convert explicitly, e.g. " + name + ".astype('" + fix_dtype +
                    "')");
  if (static_cast<int>(a.shape.size()) != ndim)
    throw ValueError(std::string(name) + " must be " + std::to_string(ndim) +
                     "-dimensional, got ndim=" + std::to_string(a.shape.size()));
  if (!a.c_contiguous())
    throw ValueError(std::string(name) + " must be C-contiguous; pass " + name +
                     ".copy() (cupy.ascontiguousarray / tensor.contiguous())");
  if (writable && a.readonly)
    throw ValueError(std::string(name) + " is read-only; pass a writable output array");
  return a;
}

}  // namespace lamina::py_detail
