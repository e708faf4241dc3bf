// Bindings for the memory kernels (lamina.kernels): softmax gate, EMA blend, damped update,
// heat, promotion selection, capacity projection. Arguments are checked holding the GIL;
// outputs are allocated (or the caller's `out` checked) before the GIL is released around
// the native loop.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "lamina/blend.hpp"
#include "lamina/evict.hpp"
#include "lamina/gating.hpp"
#include "lamina/heat.hpp"

namespace lamina::py_detail {

namespace {

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

bool is_number(const py::handle& o) {
  return (py::isinstance<py::float_>(o) || py::isinstance<py::int_>(o)) &&
         !py::isinstance<py::bool_>(o);
}

// A scalar (Python float/int) or a 1-D float32/float64 array of length m, read in place.
RowParam row_param(const py::handle& obj, const char* name, std::size_t m, const char* rows_what) {
  if (is_number(obj)) return RowParam::of(obj.cast<double>());
  if (!py::isinstance<py::array>(obj))
    throw TypeError(std::string(name) + " must be a float or a 1-D float32/float64 array, got " +
                    py::str(py::type::of(obj)).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  RowParam p;
  if (a.dtype().is(py::dtype::of<float>())) {
    a = checked_array<float>(obj, name, 1, "float32");
    p = RowParam::of(static_cast<const float*>(a.data()));
  } else if (a.dtype().is(py::dtype::of<double>())) {
    a = checked_array<double>(obj, name, 1, "float64");
    p = RowParam::of(static_cast<const double*>(a.data()));
  } else {
    throw TypeError(std::string(name) + " array must have dtype float32 or float64, got " +
                    dtype_str(a.dtype()) + "; convert explicitly with " + name +
                    ".astype(numpy.float32)");
  }
  LAMINA_CHECK(static_cast<std::size_t>(a.shape(0)) == m, name, " has ", a.shape(0),
               " values but there are ", m, " ", rows_what, "; pass a scalar or one value per ",
               rows_what);
  return p;
}

// The caller's `out` (checked: dtype, shape, contiguity, writable) or a fresh array.
template <class T>
py::array_t<T> out_array(const py::object& out, const std::vector<py::ssize_t>& shape,
                         const char* dtype_name) {
  if (out.is_none()) return py::array_t<T>(shape);
  py::array a = checked_array<T>(out, "out", static_cast<int>(shape.size()), dtype_name);
  check_shape("out", shape_of(a), shape);
  LAMINA_CHECK(a.writeable(), "out is read-only; pass a writable array");
  return py::reinterpret_borrow<py::array_t<T>>(a);
}

// Moves a vector into a numpy array without copying (the array owns the vector).
py::array_t<int64_t> to_numpy(std::vector<int64_t>&& v) {
  if (v.empty()) return py::array_t<int64_t>(0);
  auto* owned = new std::vector<int64_t>(std::move(v));
  py::capsule keep(owned, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  return py::array_t<int64_t>({static_cast<py::ssize_t>(owned->size())}, owned->data(), keep);
}

py::array writable_rows(const py::handle& obj) {
  py::array rows = checked_array<float>(obj, "rows", 2, "float32");
  LAMINA_CHECK(rows.writeable(), "rows is read-only; the update is in place, pass a writable "
                                 "array (e.g. rows.copy())");
  return rows;
}

// Shared argument handling of ema_blend and damped_update.
struct RowUpdateArgs {
  py::array rows, targets, index;
  std::size_t n = 0, d = 0, m = 0;
  const int64_t* idx = nullptr;
};

RowUpdateArgs row_update_args(const py::object& rows_obj, const py::object& targets_obj,
                              const py::object& index_obj) {
  RowUpdateArgs a;
  a.rows = writable_rows(rows_obj);
  a.targets = checked_array<float>(targets_obj, "targets", 2, "float32");
  a.n = a.rows.shape(0);
  a.d = a.rows.shape(1);
  a.m = a.targets.shape(0);
  check_targets(a.d, shape_of(a.targets));
  if (!index_obj.is_none()) {
    a.index = checked_array<int64_t>(index_obj, "index", 1, "int64");
    check_index(a.index.shape(0), a.m, a.n);
    a.idx = static_cast<const int64_t*>(a.index.data());
  } else {
    check_index(-1, a.m, a.n);
  }
  return a;
}

NumColumn num_column(const py::handle& obj, const char* name, std::size_t n) {
  if (!py::isinstance<py::array>(obj))
    throw TypeError(std::string(name) + " must be a numpy.ndarray of dtype float32, int32 or "
                    "int64, got " + py::str(py::type::of(obj)).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  NumColumn c;
  if (a.dtype().is(py::dtype::of<float>())) {
    a = checked_array<float>(obj, name, 1, "float32");
    c.kind = NumColumn::Kind::F32;
  } else if (a.dtype().is(py::dtype::of<int32_t>())) {
    a = checked_array<int32_t>(obj, name, 1, "int32");
    c.kind = NumColumn::Kind::I32;
  } else if (a.dtype().is(py::dtype::of<int64_t>())) {
    a = checked_array<int64_t>(obj, name, 1, "int64");
    c.kind = NumColumn::Kind::I64;
  } else {
    throw TypeError(std::string(name) + " must have dtype float32, int32 or int64, got " +
                    dtype_str(a.dtype()) + "; convert explicitly with " + name +
                    ".astype(numpy.float32)");
  }
  check_length(name, a.shape(0), n, "one per row, like last_access");
  c.data = a.data();
  return c;
}

const uint8_t* live_mask(const py::object& obj, std::size_t n) {
  if (obj.is_none()) return nullptr;
  if (!py::isinstance<py::array>(obj))
    throw TypeError("live must be a numpy.ndarray of dtype bool or uint8");
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (a.dtype().is(py::dtype::of<bool>()))
    a = checked_array<bool>(obj, "live", 1, "bool_");
  else if (a.dtype().is(py::dtype::of<uint8_t>()))
    a = checked_array<uint8_t>(obj, "live", 1, "uint8");
  else
    throw TypeError("live must have dtype bool or uint8, got " + dtype_str(a.dtype()) +
                    "; convert explicitly with live.astype(numpy.bool_)");
  check_length("live", a.shape(0), n, "one per row");
  return static_cast<const uint8_t*>(a.data());
}

/// ema_blend (kDamped false, `param` α) or damped_update (true, `param` λ) of the host arrays:
/// `rows` updated in place (GIL released), the drift of each updated row returned (in `out`
/// when given), as cuda_rows_call does for device arrays.
template <bool kDamped>
py::array_t<float> rows_call(const py::object& rows, const py::object& targets,
                             const py::object& param, const py::object& index, bool renormalize,
                             const py::object& out, int threads, const char* pname) {
  RowUpdateArgs a = row_update_args(rows, targets, index);
  const RowParam p = row_param(param, pname, a.m, "updated rows");
  py::array_t<float> drift = out_array<float>(out, {static_cast<py::ssize_t>(a.m)}, "float32");
  {
    float* rp = static_cast<float*>(a.rows.mutable_data());
    const float* tp = static_cast<const float*>(a.targets.data());
    float* dp = drift.mutable_data();
    py::gil_scoped_release nogil;
    if constexpr (kDamped)
      damped_update(rp, a.n, a.d, tp, a.m, a.idx, p, dp, threads);
    else
      ema_blend(rp, a.n, a.d, tp, a.m, a.idx, p, renormalize, dp, threads);
  }
  return drift;
}

}  // namespace

void register_kernels(py::module_& m) {
  m.def(
      "softmax_gate",
      [](const py::object& relevance, const py::object& beta, const py::object& max_entropy,
         int max_doublings, const py::object& out, int threads, int predict) {
        py::array r = checked_array<float>(relevance, "relevance", 2, "float32");
        const std::size_t b = r.shape(0), L = r.shape(1);
        const RowParam bp = row_param(beta, "beta", b, "rows of relevance");
        const bool has_eps = !max_entropy.is_none();
        double eps = 0.0;
        if (has_eps) {
          if (!is_number(max_entropy))
            throw TypeError("max_entropy must be a float or None");
          eps = max_entropy.cast<double>();
        }
        py::array_t<float> gamma =
            out_array<float>(out, {static_cast<py::ssize_t>(b), static_cast<py::ssize_t>(L)},
                             "float32");
        py::array_t<double> beta_used(static_cast<py::ssize_t>(b));
        {
          const float* rp = static_cast<const float*>(r.data());
          float* gp = gamma.mutable_data();
          double* bu = beta_used.mutable_data();
          py::gil_scoped_release nogil;
          softmax_gate(rp, b, L, bp, has_eps, eps, max_doublings, gp, bu, threads, predict);
        }
        return py::make_tuple(gamma, beta_used);
      },
      py::arg("relevance"), py::arg("beta"), py::arg("max_entropy") = py::none(),
      py::arg("max_doublings") = 32, py::arg("out") = py::none(), py::arg("threads") = 0,
      // internal: the ε predictor (-1 by size, 0 off, 1 on); tests compare the paths
      py::arg("predict") = -1);

  m.def(
      "ema_blend",
      [](const py::object& rows, const py::object& targets, const py::object& alpha,
         const py::object& index, bool renormalize, const py::object& out, int threads) {
        return rows_call<false>(rows, targets, alpha, index, renormalize, out, threads, "alpha");
      },
      py::arg("rows"), py::arg("targets"), py::arg("alpha"), py::arg("index") = py::none(),
      py::arg("renormalize") = false, py::arg("out") = py::none(), py::arg("threads") = 0);

  m.def(
      "damped_update",
      [](const py::object& rows, const py::object& targets, const py::object& lam,
         const py::object& index, const py::object& out, int threads) {
        return rows_call<true>(rows, targets, lam, index, false, out, threads, "lam");
      },
      py::arg("rows"), py::arg("targets"), py::arg("lam"), py::arg("index") = py::none(),
      py::arg("out") = py::none(), py::arg("threads") = 0);

  m.def(
      "heat_scores",
      [](const py::object& visits, const py::object& interaction_len,
         const py::object& last_access, double now, double a, double b, double c, double mu,
         const py::object& out, int threads) {
        py::array last = checked_array<double>(last_access, "last_access", 1, "float64");
        const std::size_t n = last.shape(0);
        const NumColumn v = num_column(visits, "visits", n);
        const NumColumn l = num_column(interaction_len, "interaction_len", n);
        py::array_t<float> heat = out_array<float>(out, {static_cast<py::ssize_t>(n)}, "float32");
        {
          const double* lp = static_cast<const double*>(last.data());
          float* hp = heat.mutable_data();
          py::gil_scoped_release nogil;
          heat_scores(v, l, lp, n, now, a, b, c, mu, hp, threads);
        }
        return heat;
      },
      py::arg("visits"), py::arg("interaction_len"), py::arg("last_access"), py::arg("now"),
      py::arg("a") = 1.0, py::arg("b") = 1.0, py::arg("c") = 1.0, py::arg("mu") = 1e7,
      py::arg("out") = py::none(), py::arg("threads") = 0);

  m.def(
      "select_hot",
      [](const py::object& heat, double threshold, const py::object& namespaces, int threads) {
        py::array h = checked_array<float>(heat, "heat", 1, "float32");
        const std::size_t n = h.shape(0);
        const uint64_t* nsp = nullptr;
        py::array ns;
        if (!namespaces.is_none()) {
          ns = checked_array<uint64_t>(namespaces, "namespaces", 1, "uint64");
          check_length("namespaces", ns.shape(0), n, "one per heat value");
          nsp = static_cast<const uint64_t*>(ns.data());
        }
        std::vector<int64_t> slots;
        {
          const float* hp = static_cast<const float*>(h.data());
          py::gil_scoped_release nogil;
          slots = select_hot(hp, n, threshold, nsp, threads);
        }
        return to_numpy(std::move(slots));
      },
      py::arg("heat"), py::arg("threshold"), py::arg("namespaces") = py::none(),
      py::arg("threads") = 0);

  m.def(
      "evict_to_capacity",
      [](const py::object& scores, const py::object& namespaces, long long default_capacity,
         const py::object& cap_keys, const py::object& cap_values, const py::object& live,
         int threads) {
        py::array s = checked_array<float>(scores, "scores", 1, "float32");
        const std::size_t n = s.shape(0);
        py::array ns = checked_array<uint64_t>(namespaces, "namespaces", 1, "uint64");
        check_evict_namespaces(ns.shape(0), n);
        py::array ck = checked_array<uint64_t>(cap_keys, "capacity keys", 1, "uint64");
        py::array cv = checked_array<int64_t>(cap_values, "capacity values", 1, "int64");
        check_capacity(ck.shape(0), cv.shape(0));
        const uint8_t* lp = live_mask(live, n);
        std::vector<int64_t> slots;
        {
          const float* sp = static_cast<const float*>(s.data());
          const uint64_t* np_ = static_cast<const uint64_t*>(ns.data());
          const uint64_t* kp = static_cast<const uint64_t*>(ck.data());
          const int64_t* vp = static_cast<const int64_t*>(cv.data());
          const std::size_t nc = ck.shape(0);
          py::gil_scoped_release nogil;
          slots = evict_to_capacity(sp, np_, n, lp, default_capacity, kp, vp, nc, threads);
        }
        return to_numpy(std::move(slots));
      },
      py::arg("scores"), py::arg("namespaces"), py::arg("default_capacity"),
      py::arg("cap_keys"), py::arg("cap_values"), py::arg("live") = py::none(),
      py::arg("threads") = 0);
}

}  // namespace lamina::py_detail
