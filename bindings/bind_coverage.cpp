// The capacity projection's neighbour-list passes (cpp/lamina/coverage.hpp), private to
// lamina.memory.coverage: arrays are checked (dtype, shape, contiguity, writability) holding
// the GIL, which is released around the loops.
#include <cstdint>
#include <string>

#include "common.hpp"
#include "lamina/coverage.hpp"

namespace lamina::py_detail {

namespace {

py::array writable(py::array a, const char* name) {
  if (!a.writeable()) throw ::lamina::ValueError(std::string(name) + " must be writable");
  return a;
}

void check_rows_k(const py::array& a, const char* name, py::ssize_t k) {
  LAMINA_CHECK(a.shape(1) == k, name, " has ", a.shape(1), " columns, expected ", k, " (as I)");
}

}  // namespace

void register_coverage(py::module_& m) {
  m.def(
      "_coverage_nearest",
      [](const py::object& I_obj, const py::object& S_obj, const py::object& rows_obj,
         const py::object& on_obj, const py::object& group_obj) {
        py::array I = checked_array<int64_t>(I_obj, "I", 2, "int64");
        py::array S = checked_array<float>(S_obj, "S", 2, "float32");
        py::array rows = checked_array<int64_t>(rows_obj, "rows", 1, "int64");
        py::array on = checked_array<bool>(on_obj, "on", 1, "bool_");
        py::array group = checked_array<int64_t>(group_obj, "group", 1, "int64");
        const py::ssize_t k = I.shape(1);
        check_rows_k(S, "S", k);
        LAMINA_CHECK(S.shape(0) == I.shape(0), "S has ", S.shape(0), " rows, I has ", I.shape(0));
        LAMINA_CHECK(on.shape(0) == group.shape(0), "on has ", on.shape(0), " columns, group has ",
                     group.shape(0));
        const py::ssize_t m_rows = rows.shape(0);
        py::array_t<float> best(m_rows);
        py::array_t<int64_t> where(m_rows);
        {
          py::gil_scoped_release nogil;
          coverage_nearest(static_cast<const int64_t*>(I.data()), static_cast<const float*>(S.data()),
                           I.shape(0), k, static_cast<const int64_t*>(rows.data()), m_rows,
                           static_cast<const uint8_t*>(on.data()), static_cast<const int64_t*>(group.data()),
                           on.shape(0), best.mutable_data(), where.mutable_data());
        }
        return py::make_tuple(best, where);
      },
      py::arg("I"), py::arg("S"), py::arg("rows"), py::arg("on"), py::arg("group"),
      "Per row of ``rows``: the best listed entry of ``I`` / ``S`` (shape (n, k)) whose column is "
      "``on`` and of another ``group`` than the row's; (-inf, -1) when none. Private to lamina.");
  m.def(
      "_coverage_remap",
      [](const py::object& I_obj, const py::object& S_obj, const py::object& kth_obj, long long m_rows,
         const py::object& remap_obj) {
        py::array I = writable(checked_array<int64_t>(I_obj, "I", 2, "int64"), "I");
        py::array S = writable(checked_array<float>(S_obj, "S", 2, "float32"), "S");
        py::array kth = writable(checked_array<float>(kth_obj, "kth", 1, "float32"), "kth");
        py::array remap = checked_array<int64_t>(remap_obj, "remap", 1, "int64");
        const py::ssize_t k = I.shape(1);
        check_rows_k(S, "S", k);
        LAMINA_CHECK(m_rows >= 0 && m_rows <= I.shape(0) && m_rows <= S.shape(0) && m_rows <= kth.shape(0),
                     "m = ", m_rows, " must be in [0, rows of I, S and kth]");
        {
          py::gil_scoped_release nogil;
          coverage_remap(static_cast<int64_t*>(I.mutable_data()), static_cast<float*>(S.mutable_data()),
                         static_cast<float*>(kth.mutable_data()), m_rows, k,
                         static_cast<const int64_t*>(remap.data()), remap.shape(0));
        }
      },
      py::arg("I"), py::arg("S"), py::arg("kth"), py::arg("m"), py::arg("remap"),
      "Renumber the listed columns of rows 0..m-1 of ``I`` through ``remap`` in place; entries "
      "that map to -1 become free slots (``S`` -inf, the row's ``kth`` -inf). Private to lamina.");
}

}  // namespace lamina::py_detail
