// Bindings for the BM25 lexical index (lamina/lexical.hpp).
#include <Python.h>

#include <memory>
#include <vector>

#include "common.hpp"
#include "lamina/lexical.hpp"
#include "optional_array.hpp"

namespace lamina::py_detail {

namespace {

// A namespace argument: a Python int in [0, 2^64) for every row, or a uint64 array of n values.
struct NamespaceArg {
  uint64_t scalar = 0;
  py::array arr;
  const uint64_t* ptr = &scalar;
  bool per_row = false;
};

NamespaceArg parse_namespace(const py::object& ns, std::size_t n, const char* per) {
  NamespaceArg a;
  if (py::isinstance<py::bool_>(ns))
    throw TypeError("namespace must be an int or a uint64 array, not bool");
  if (py::isinstance<py::int_>(ns)) {
    py::int_ i = ns;
    LAMINA_CHECK(py::int_(0) <= i && i <= py::int_(py::cast(UINT64_MAX)),
                 "namespace must be in [0, 2**64)");
    a.scalar = i.cast<uint64_t>();
    a.ptr = &a.scalar;
    return a;
  }
  a.arr = checked_array<uint64_t>(ns, "namespace", 1, "uint64");
  LAMINA_CHECK(static_cast<std::size_t>(a.arr.shape(0)) == n, "namespace must be one int or one ",
               "value per ", per, " (", n, "), got ", a.arr.shape(0));
  a.ptr = static_cast<const uint64_t*>(a.arr.data());
  a.per_row = true;
  return a;
}

// Hash every term of every document (a sequence of sequences of str) with term_hash. Runs with
// the GIL held (it reads Python strings) but never creates a Python object per term.
std::pair<py::array_t<uint64_t>, py::array_t<int64_t>> hash_terms(const py::object& docs) {
  PyObject* outer = PySequence_Fast(docs.ptr(), "docs must be a sequence of token lists");
  if (!outer) throw py::error_already_set();
  py::object outer_ref = py::reinterpret_steal<py::object>(outer);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(outer);
  std::vector<uint64_t> hashes;
  py::array_t<int64_t> offsets(n + 1);
  int64_t* off = offsets.mutable_data();
  off[0] = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* doc = PySequence_Fast_GET_ITEM(outer, i);
    if (PyUnicode_Check(doc))
      throw TypeError("docs[" + std::to_string(i) +
                      "] is a str; each document must be a list of tokens (str)");
    PyObject* inner = PySequence_Fast(doc, "each document must be a sequence of str tokens");
    if (!inner) throw py::error_already_set();
    py::object inner_ref = py::reinterpret_steal<py::object>(inner);
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(inner);
    for (Py_ssize_t j = 0; j < m; ++j) {
      PyObject* tok = PySequence_Fast_GET_ITEM(inner, j);
      if (!PyUnicode_Check(tok))
        throw TypeError("docs[" + std::to_string(i) + "][" + std::to_string(j) +
                        "] must be a str, got " + Py_TYPE(tok)->tp_name);
      Py_ssize_t len = 0;
      const char* s = PyUnicode_AsUTF8AndSize(tok, &len);
      if (!s) throw py::error_already_set();
      hashes.push_back(term_hash(std::string_view(s, static_cast<std::size_t>(len))));
    }
    off[i + 1] = static_cast<int64_t>(hashes.size());
  }
  py::array_t<uint64_t> h(hashes.size());
  std::copy(hashes.begin(), hashes.end(), h.mutable_data());
  return {h, offsets};
}

struct TermsArg {
  py::array hashes, offsets;
  std::size_t n_hashes = 0, n = 0;
};

TermsArg check_terms(const py::object& hashes, const py::object& offsets) {
  TermsArg t;
  t.hashes = checked_array<uint64_t>(hashes, "hashes", 1, "uint64");
  t.offsets = checked_array<int64_t>(offsets, "offsets", 1, "int64");
  LAMINA_CHECK(t.offsets.shape(0) >= 1, "offsets must have n + 1 >= 1 entries, got 0");
  t.n_hashes = t.hashes.shape(0);
  t.n = t.offsets.shape(0) - 1;
  return t;
}

}  // namespace

void register_lexical(py::module_& m) {
  m.def("lexical_term_hash", [](const std::string& term) { return term_hash(term); },
        py::arg("term"));
  m.def("lexical_hash_terms", &hash_terms, py::arg("docs"));

  py::class_<LexicalIndex, std::shared_ptr<LexicalIndex>>(m, "LexicalIndex")
      .def(py::init([](double k1, double b) { return std::make_shared<LexicalIndex>(k1, b); }),
           py::arg("k1") = 1.2, py::arg("b") = 0.75)
      .def_property_readonly("k1", &LexicalIndex::k1)
      .def_property_readonly("b", &LexicalIndex::b)
      .def("__len__", &LexicalIndex::size)
      .def("count", &LexicalIndex::count, py::arg("namespace"))
      .def("stats",
           [](const LexicalIndex& L, uint64_t ns) {
             const LexicalStats s = L.stats(ns);
             py::dict d;
             d["docs"] = s.docs;
             d["avg_len"] = s.avg_len;
             d["terms"] = s.terms;
             d["postings"] = s.postings;
             d["dead_docs"] = s.dead_docs;
             return d;
           },
           py::arg("namespace"))
      .def(
          "add",
          [](LexicalIndex& L, const py::object& keys, const py::object& ns, const py::object& hashes,
             const py::object& offsets) {
            py::array k = checked_array<int64_t>(keys, "keys", 1, "int64");
            TermsArg t = check_terms(hashes, offsets);
            const std::size_t n = k.shape(0);
            LAMINA_CHECK(t.n == n, "offsets must have len(keys) + 1 = ", n + 1, " entries, got ",
                         t.n + 1);
            NamespaceArg a = parse_namespace(ns, n, "document");
            const int64_t* kp = static_cast<const int64_t*>(k.data());
            const uint64_t* hp = static_cast<const uint64_t*>(t.hashes.data());
            const int64_t* op = static_cast<const int64_t*>(t.offsets.data());
            py::gil_scoped_release nogil;
            L.add(kp, n, a.ptr, a.per_row, hp, t.n_hashes, op);
          },
          py::arg("keys"), py::arg("namespace"), py::arg("hashes"), py::arg("offsets"))
      .def(
          "remove",
          [](LexicalIndex& L, const py::object& keys, bool missing_ok) {
            py::array k = checked_array<int64_t>(keys, "keys", 1, "int64");
            const int64_t* kp = static_cast<const int64_t*>(k.data());
            const std::size_t n = k.shape(0);
            py::gil_scoped_release nogil;
            return L.remove(kp, n, missing_ok);
          },
          py::arg("keys"), py::arg("missing_ok") = false)
      .def(
          "contains",
          [](const LexicalIndex& L, const py::object& keys) {
            py::array k = checked_array<int64_t>(keys, "keys", 1, "int64");
            py::array_t<bool> out(k.shape(0));
            L.contains(static_cast<const int64_t*>(k.data()), k.shape(0),
                       reinterpret_cast<uint8_t*>(out.mutable_data()));
            return out;
          },
          py::arg("keys"))
      .def("compact",
           [](LexicalIndex& L) {
             py::gil_scoped_release nogil;
             L.compact();
           })
      .def(
          "search",
          [](const LexicalIndex& L, const py::object& hashes, const py::object& offsets,
             const py::object& ns, long long k, int threads, const py::object& allow) {
            LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
            TermsArg t = check_terms(hashes, offsets);
            const auto al = optional_array<int64_t>(allow, "allow", "int64");
            NamespaceArg a = parse_namespace(ns, t.n, "query");
            py::array_t<float> scores({t.n, static_cast<std::size_t>(k)});
            py::array_t<int64_t> out_keys({t.n, static_cast<std::size_t>(k)});
            {
              const uint64_t* hp = static_cast<const uint64_t*>(t.hashes.data());
              const int64_t* op = static_cast<const int64_t*>(t.offsets.data());
              float* so = scores.mutable_data();
              int64_t* ko = out_keys.mutable_data();
              py::gil_scoped_release nogil;
              L.search(hp, t.n_hashes, op, t.n, a.ptr, a.per_row, static_cast<std::size_t>(k),
                       threads, so, ko, al.data, al.size);
            }
            return py::make_tuple(scores, out_keys);
          },
          py::arg("hashes"), py::arg("offsets"), py::arg("namespace"), py::arg("k"),
          py::arg("threads") = 0, py::arg("allow") = py::none());
}

}  // namespace lamina::py_detail
