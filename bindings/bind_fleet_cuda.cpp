// The fleet step's binding (CudaFleetStep: search -> gate -> heat bump as one graph launch
// over a CudaVectorArena).
#if defined(LAMINA_WITH_CUDA)
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "cuda_array.hpp"
#include "cuda_call.hpp"
#include "arena.hpp"
#include "fleet.hpp"

namespace lamina::py_detail {

void register_fleet_cuda(py::module_& m) {
  using CA = cuda::CudaVectorArena;
  // ---- the fleet step (search -> gate -> heat bump as one graph launch) -------------------
  using FS = cuda::FleetStep;
  py::class_<FS, std::shared_ptr<FS>>(m, "CudaFleetStep")
      .def(py::init([](std::shared_ptr<CA> arena, const std::vector<long long>& layers,
                       long long k, long long oversample, const std::string& metric,
                       long long relevance_top,
                       double beta, const py::object& max_entropy, int max_doublings, double a,
                       double b, double c, double mu) {
             cuda::FleetParams p;
             for (long long l : layers) {
               check_layer(l);
               p.layers.push_back(static_cast<uint8_t>(l));
             }
             check_k(k);
             LAMINA_CHECK(relevance_top >= 1, "relevance_top must be >= 1, got ", relevance_top);
             LAMINA_CHECK(oversample >= 0, "oversample must be >= 0, got ", oversample);
             p.k = static_cast<std::size_t>(k);
             p.oversample = static_cast<std::size_t>(oversample);
             p.metric = parse_metric(metric);
             p.relevance_top = static_cast<std::size_t>(relevance_top);
             p.beta = beta;
             p.has_max_entropy = !max_entropy.is_none();
             p.max_entropy = p.has_max_entropy ? max_entropy.cast<double>() : 0.0;
             p.max_doublings = max_doublings;
             p.a = a;
             p.b = b;
             p.c = c;
             p.mu = mu;
             return std::make_shared<FS>(std::move(arena), std::move(p));
           }),
           py::arg("arena"), py::arg("layers"), py::arg("k"), py::arg("oversample"),
           py::arg("metric"),
           py::arg("relevance_top"), py::arg("beta"), py::arg("max_entropy"),
           py::arg("max_doublings"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("mu"))
      .def(
          "run",
          [](FS& F, const py::object& queries, const py::object& namespaces, double now,
             const py::object& visits, const py::object& interaction_len,
             const py::object& last_access, const py::object& heat, const py::object& scores,
             const py::object& ids, const py::object& relevance, const py::object& gamma,
             const py::object& beta_used, bool graph, std::uintptr_t stream) {
            const auto& prm = F.params();
            const py::ssize_t L = static_cast<py::ssize_t>(prm.layers.size());
            const py::ssize_t k = static_cast<py::ssize_t>(prm.k);
            // queries: a device array, or a numpy array (then staged with the step's one copy)
            const bool host_q = !has_cai(queries);
            CudaArray q;
            py::array hq;
            py::ssize_t nq = 0;
            if (host_q) {
              hq = check_host_queries(queries, F.dim(), "the arena's dim");
              nq = hq.shape(0);
            } else {
              q = checked_cuda_array(queries, "queries", 2, "f4", "float32", false);
              check_columns("queries", q.shape[0], q.shape[1], F.dim(), "the arena's dim");
              nq = q.shape[0];
            }
            py::array ns = checked_array<uint64_t>(namespaces, "namespaces", 1, "uint64");
            check_length("namespaces", ns.shape(0), nq, "one per query");
            CudaArray v = vec1d(visits, "visits");
            CudaArray il = vec1d(interaction_len, "interaction_len");
            CudaArray la = checked_cuda_array(last_access, "last_access", 1, "f8", "float64", true);
            CudaArray h = checked_cuda_array(heat, "heat", 1, "f4", "float32", true);
            LAMINA_CHECK(!v.readonly, "visits is read-only; the step bumps it in place");
            cuda::FleetColumns cols;
            cols.visits_kind = col_kind(v, "visits");
            cols.len_kind = col_kind(il, "interaction_len");
            const py::ssize_t n = la.shape[0];
            check_length("visits", v.shape[0], n, "one per arena row, like last_access");
            check_length("interaction_len", il.shape[0], n, "one per arena row, like last_access");
            check_length("heat", h.shape[0], n, "one per arena row, like last_access");
            CudaArray so = checked_cuda_array(scores, "out scores", 3, "f4", "float32", true);
            CudaArray io = checked_cuda_array(ids, "out ids", 3, "i8", "int64", true);
            CudaArray ro = checked_cuda_array(relevance, "out relevance", 2, "f4", "float32", true);
            CudaArray go = checked_cuda_array(gamma, "out gamma", 2, "f4", "float32", true);
            CudaArray bo = checked_cuda_array(beta_used, "out beta_used", 1, "f8", "float64", true);
            check_shape("out scores", so.shape, {nq, L, k});
            check_shape("out ids", io.shape, {nq, L, k});
            check_shape("out relevance", ro.shape, {nq, L});
            check_shape("out gamma", go.shape, {nq, L});
            check_shape("out beta_used", bo.shape, {nq});
            DeviceCall call;
            if (!host_q) call.add(q, "queries");
            const std::pair<const CudaArray*, const char*> all[] = {
                {&v, "visits"}, {&il, "interaction_len"},
                {&la, "last_access"}, {&h, "heat"}, {&so, "out scores"}, {&io, "out ids"},
                {&ro, "out relevance"}, {&go, "out gamma"}, {&bo, "out beta_used"}};
            for (const auto& [arr, name] : all) call.add(*arr, name);
            LAMINA_CHECK(call.device < 0 || call.device == F.arena_device(), "the arrays are on cuda:",
                         call.device, " but the arena is on cuda:", F.arena_device());
            cols.visits = v.as<void>();
            cols.interaction_len = il.as<const void>();
            cols.last_access = la.as<double>();
            cols.heat = h.as<float>();
            cols.n = static_cast<std::size_t>(n);
            cuda::FleetOutputs out{so.as<float>(), io.as<int64_t>(), ro.as<float>(),
                                   go.as<float>(), bo.as<double>()};
            const uint64_t* nsp = static_cast<const uint64_t*>(ns.data());
            if (nq == 0) return;
            call.run_on(F.arena_device(), stream, [&](void* st) {
              const float* qp = host_q ? static_cast<const float*>(hq.data()) : q.as<const float>();
              F.run(qp, host_q, static_cast<std::size_t>(nq), nsp, now, cols, out, graph, st);
            });
          },
          py::arg("queries"), py::arg("namespaces"), py::arg("now"), py::arg("visits"),
          py::arg("interaction_len"), py::arg("last_access"), py::arg("heat"),
          py::arg("scores"), py::arg("ids"), py::arg("relevance"), py::arg("gamma"),
          py::arg("beta_used"), py::arg("graph"), py::arg("stream"))
      .def("stats", [](const FS& F) {
        const cuda::FleetStats s = F.stats();
        py::dict d;
        d["eager"] = s.eager;
        d["captures"] = s.captures;
        d["updates"] = s.updates;
        d["instantiations"] = s.instantiations;
        d["replays"] = s.replays;
        return d;
      });
}

}  // namespace lamina::py_detail

#endif  // LAMINA_WITH_CUDA
