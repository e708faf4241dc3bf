// Cyclic-GC bookkeeping for long-lived Python records (see python/lamina/memory/records.py).
#include "common.hpp"

namespace lamina::py_detail {

void register_gc(py::module_& m) {
  m.def(
      "_gc_untrack",
      [](py::handle obj) {
        // CPython's own rule for dicts and tuples of atomic values, applied by the caller to an
        // object it knows can never be part of a reference cycle: the collector stops visiting
        // it (a full collection's cost follows the tracked objects). Refcounting still frees it;
        // the deallocator of a heap type untracks again only when tracked.
        if (PyObject_IS_GC(obj.ptr()) && PyObject_GC_IsTracked(obj.ptr())) PyObject_GC_UnTrack(obj.ptr());
      },
      py::arg("obj"),
      "Stop the cyclic garbage collector from visiting ``obj`` (an object that can never be part "
      "of a reference cycle). Private to lamina.");
}

}  // namespace lamina::py_detail
