// Bindings for the KV-cache eviction core (lamina/kv.hpp). Private: python/lamina/kv wraps them.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "checks.hpp"
#include "common.hpp"
#include "lamina/kv.hpp"

namespace lamina::py_detail {

namespace {

// float32, C-contiguous, ndim in {lo..hi}.
py::array f32_array(const py::handle& obj, const char* name, int lo, int hi) {
  if (!py::isinstance<py::array>(obj))
    throw TypeError(std::string(name) + " must be a numpy.ndarray of dtype float32, got " +
                    py::str(py::type::of(obj)).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(obj);
  const int nd = static_cast<int>(a.ndim());
  if (nd < lo || nd > hi)
    throw ValueError(std::string(name) + " must have " + std::to_string(lo) +
                     (lo == hi ? "" : " to " + std::to_string(hi)) + " dimensions, got ndim=" +
                     std::to_string(nd));
  return checked_array<float>(obj, name, nd, "float32");
}

std::size_t dim(const py::array& a, int i) { return static_cast<std::size_t>(a.shape(i)); }

// Parsed arguments of the scoring functions (arrays kept alive while the spec points at them).
struct ScoreArgs {
  py::array x, per_row, per_token;
  kv::ScoreSpec sp;
  kv::RowScale scale;
};

ScoreArgs parse_score_args(const py::object& x, long long kv_heads, long long n_candidates,
                           const std::string& window_reduce, bool causal_normalize,
                           const std::string& pool, long long kernel,
                           const std::string& group_reduce, const py::object& scale_per_row,
                           const py::object& scale_per_token) {
  ScoreArgs A;
  A.x = f32_array(x, "scores", 3, 4);
  const py::array& a = A.x;
  A.sp = score_spec(std::vector<std::size_t>(a.shape(), a.shape() + a.ndim()), kv_heads,
                    n_candidates, window_reduce, causal_normalize, pool, kernel, group_reduce);
  if (!scale_per_row.is_none()) {
    A.per_row = checked_array<float>(scale_per_row, "value_norms", 2, "float32");
    check_value_norms({A.per_row.shape(0), A.per_row.shape(1)}, A.sp);
    A.scale.per_row = static_cast<const float*>(A.per_row.data());
  }
  if (!scale_per_token.is_none()) {
    A.per_token = checked_array<float>(scale_per_token, "value_norms", 3, "float32");
    check_value_norms({A.per_token.shape(0), A.per_token.shape(1), A.per_token.shape(2)}, A.sp);
    A.scale.per_token = static_cast<const float*>(A.per_token.data());
  }
  return A;
}

// offsets[r + 1] = offsets[r] + k[r] + tail, with k checked against [0, n].
py::array_t<int64_t> make_offsets(const py::array& kk, long long n, long long tail) {
  const std::size_t R = static_cast<std::size_t>(kk.size());
  py::array_t<int64_t> offsets(R + 1);
  kv_offsets(static_cast<const int64_t*>(kk.data()), R, kk.ndim() == 2 ? dim(kk, 1) : 1, n, tail,
             offsets.mutable_data());
  return offsets;
}


void register_kv_scores(py::module_& m) {
  m.def(
      "kv_window_scores",
      [](const py::object& x, long long kv_heads, long long n_candidates,
         const std::string& window_reduce, bool causal_normalize, const std::string& pool,
         long long kernel, const std::string& group_reduce, const py::object& scale_per_row,
         const py::object& scale_per_token, int threads, bool entropy) -> py::object {
        ScoreArgs A = parse_score_args(x, kv_heads, n_candidates, window_reduce,
                                       causal_normalize, pool, kernel, group_reduce,
                                       scale_per_row, scale_per_token);
        const kv::ScoreSpec& sp = A.sp;
        py::array_t<float> out({sp.layers, sp.kv_heads, sp.n_candidates});
        std::vector<kv::RowEntropySums> sums(entropy ? sp.layers * sp.kv_heads : 0);
        py::array_t<double> ent(entropy ? sp.layers : 0);
        {
          const float* in = static_cast<const float*>(A.x.data());
          float* o = out.mutable_data();
          double* e = ent.mutable_data();
          py::gil_scoped_release nogil;
          kv::window_scores(in, sp, A.scale, o, threads, entropy ? sums.data() : nullptr);
          if (entropy) kv::entropy_from_sums(sums.data(), sp.layers, sp.kv_heads, sp.n_candidates, e);
        }
        if (entropy) return py::make_tuple(out, ent);
        return std::move(out);
      },
      py::arg("scores"), py::arg("kv_heads"), py::arg("n_candidates"),
      py::arg("window_reduce") = "mean", py::arg("causal_normalize") = false,
      py::arg("pool") = "none", py::arg("kernel") = 1, py::arg("group_reduce") = "mean",
      py::arg("scale_per_row") = py::none(), py::arg("scale_per_token") = py::none(),
      py::arg("threads") = 0, py::arg("entropy") = false);

  m.def(
      "kv_score_select",
      [](const py::object& x, long long kv_heads, long long n_candidates,
         const std::string& window_reduce, bool causal_normalize, const std::string& pool,
         long long kernel, const std::string& group_reduce, const py::object& scale_per_row,
         const py::object& scale_per_token, const py::object& k, long long tail, int threads) {
        ScoreArgs A = parse_score_args(x, kv_heads, n_candidates, window_reduce,
                                       causal_normalize, pool, kernel, group_reduce,
                                       scale_per_row, scale_per_token);
        py::array kk = checked_array<int64_t>(k, "k", 2, "int64");
        LAMINA_CHECK(dim(kk, 0) == A.sp.layers && dim(kk, 1) == A.sp.kv_heads,
                     "k must have shape (", A.sp.layers, ", ", A.sp.kv_heads, ")");
        LAMINA_CHECK(tail >= 0 && static_cast<std::size_t>(tail) + A.sp.n_candidates <= A.sp.seq_len,
                     "tail must be in [0, S - n_candidates]");
        py::array_t<int64_t> offsets = make_offsets(kk, n_candidates, tail);
        const int64_t total = offsets.data()[kk.size()];
        py::array_t<int64_t> idx(static_cast<py::ssize_t>(total));
        {
          const float* in = static_cast<const float*>(A.x.data());
          const int64_t* kp = static_cast<const int64_t*>(kk.data());
          const int64_t* op = offsets.data();
          int64_t* ip = idx.mutable_data();
          py::gil_scoped_release nogil;
          kv::score_select_rows(in, A.sp, A.scale, kp, static_cast<std::size_t>(tail), op, ip,
                                threads);
        }
        return py::make_tuple(idx, offsets);
      },
      py::arg("scores"), py::arg("kv_heads"), py::arg("n_candidates"),
      py::arg("window_reduce"), py::arg("causal_normalize"), py::arg("pool"), py::arg("kernel"),
      py::arg("group_reduce"), py::arg("scale_per_row"), py::arg("scale_per_token"),
      py::arg("k"), py::arg("tail"), py::arg("threads") = 0);

  m.def(
      "kv_layer_entropy",
      [](const py::object& scores, int threads) {
        py::array s = checked_array<float>(scores, "scores", 3, "float32");
        const std::size_t L = dim(s, 0), Hkv = dim(s, 1), n = dim(s, 2);
        py::array_t<double> out(L);
        {
          const float* p = static_cast<const float*>(s.data());
          double* o = out.mutable_data();
          py::gil_scoped_release nogil;
          kv::layer_entropy(p, L, Hkv, n, o, threads);
        }
        return out;
      },
      py::arg("scores"), py::arg("threads") = 0);

  m.def(
      "kv_layer_head_counts",
      [](const py::object& scores, const py::object& total, const py::object& floor,
         int threads) {
        py::array s = checked_array<float>(scores, "scores", 3, "float32");
        const std::size_t L = dim(s, 0), Hkv = dim(s, 1), n = dim(s, 2);
        py::array t = checked_array<int64_t>(total, "total", 1, "int64");
        check_per_layer("total", dim(t, 0), L);
        py::array f;
        const int64_t* fp = nullptr;
        if (!floor.is_none()) {
          f = checked_array<int64_t>(floor, "floor", 1, "int64");
          check_per_layer("floor", dim(f, 0), L);
          fp = static_cast<const int64_t*>(f.data());
        }
        py::array_t<int64_t> out({L, Hkv});
        {
          const float* p = static_cast<const float*>(s.data());
          const int64_t* tp = static_cast<const int64_t*>(t.data());
          int64_t* o = out.mutable_data();
          py::gil_scoped_release nogil;
          kv::layer_head_counts(p, L, Hkv, n, tp, fp, o, threads);
        }
        return out;
      },
      py::arg("scores"), py::arg("total"), py::arg("floor") = py::none(),
      py::arg("threads") = 0);

  m.def(
      "kv_apportion",
      [](const py::object& weights, long long total, long long cap) {
        py::array w = checked_array<double>(weights, "weights", 1, "float64");
        const std::size_t m = dim(w, 0);
        py::array_t<int64_t> out(static_cast<py::ssize_t>(m));
        kv::apportion(static_cast<const double*>(w.data()), m, total, cap, out.mutable_data());
        return out;
      },
      py::arg("weights"), py::arg("total"), py::arg("cap"));
}

void register_kv_lava(py::module_& m) {
  m.def(
      "kv_lava_select",
      [](const py::object& x, long long kv_heads, long long n_candidates, const std::string& pool,
         long long kernel, const std::string& group_reduce, const py::object& scale_per_row,
         const py::object& scale_per_token, long long per_head, double alpha, long long tail,
         int threads) {
        ScoreArgs A = parse_score_args(x, kv_heads, n_candidates, "mean", false, pool, kernel,
                                       group_reduce, scale_per_row, scale_per_token);
        const std::size_t L = A.sp.layers, Hkv = A.sp.kv_heads;
        LAMINA_CHECK(per_head >= 0 && per_head <= n_candidates, "per_head must be in [0, ",
                     n_candidates, "], got ", per_head);
        LAMINA_CHECK(tail >= 0 && static_cast<std::size_t>(tail) + A.sp.n_candidates <= A.sp.seq_len,
                     "tail must be in [0, S - n_candidates]");
        py::array_t<double> entropy(static_cast<py::ssize_t>(L));
        py::array_t<int64_t> layer_b(static_cast<py::ssize_t>(L));
        py::array_t<int64_t> counts({L, Hkv}), budgets({L, Hkv});
        py::array_t<int64_t> offsets(static_cast<py::ssize_t>(L * Hkv + 1));
        py::array_t<int64_t> idx(static_cast<py::ssize_t>(L * Hkv * (per_head + tail)));
        {
          const float* in = static_cast<const float*>(A.x.data());
          double* ep = entropy.mutable_data();
          int64_t* lp = layer_b.mutable_data();
          int64_t* cp = counts.mutable_data();
          int64_t* bp = budgets.mutable_data();
          int64_t* op = offsets.mutable_data();
          int64_t* ip = idx.mutable_data();
          py::gil_scoped_release nogil;
          kv::lava_select(in, A.sp, A.scale, static_cast<std::size_t>(per_head), alpha,
                          static_cast<std::size_t>(tail), ep, lp, cp, bp, op, ip, threads);
        }
        return py::make_tuple(idx, offsets, counts, budgets, entropy, layer_b);
      },
      py::arg("scores"), py::arg("kv_heads"), py::arg("n_candidates"), py::arg("pool"),
      py::arg("kernel"), py::arg("group_reduce"), py::arg("scale_per_row"),
      py::arg("scale_per_token"), py::arg("per_head"), py::arg("alpha"), py::arg("tail"),
      py::arg("threads") = 0);

  m.def(
      "kv_lava_layers",
      [](const py::object& scores, const py::object& layer_budget, double alpha, long long tail,
         int threads) {
        py::array s = checked_array<float>(scores, "scores", 3, "float32");
        const std::size_t L = dim(s, 0), Hkv = dim(s, 1), n = dim(s, 2);
        py::array lb = checked_array<int64_t>(layer_budget, "layer_budget", 1, "int64");
        check_per_layer("layer_budget", dim(lb, 0), L);
        LAMINA_CHECK(tail >= 0, "tail must be >= 0");
        const int64_t* lbp = static_cast<const int64_t*>(lb.data());
        int64_t total = 0;
        for (std::size_t l = 0; l < L; ++l) {
          LAMINA_CHECK(lbp[l] >= 0 && static_cast<std::size_t>(lbp[l]) <= n, "layer_budget[",
                       l, "] = ", lbp[l], " is outside [0, ", n, "]");
          total += static_cast<int64_t>(Hkv) * (lbp[l] + tail);
        }
        py::array_t<int64_t> counts({L, Hkv}), budgets({L, Hkv});
        py::array_t<int64_t> offsets(static_cast<py::ssize_t>(L * Hkv + 1));
        py::array_t<int64_t> idx(static_cast<py::ssize_t>(total));
        {
          const float* p = static_cast<const float*>(s.data());
          int64_t* cp = counts.mutable_data();
          int64_t* bp = budgets.mutable_data();
          int64_t* op = offsets.mutable_data();
          int64_t* ip = idx.mutable_data();
          py::gil_scoped_release nogil;
          kv::lava_layers(p, L, Hkv, n, lbp, alpha, static_cast<std::size_t>(tail), cp, bp, op,
                          ip, threads);
        }
        return py::make_tuple(idx, offsets, counts, budgets);
      },
      py::arg("scores"), py::arg("layer_budget"), py::arg("alpha"), py::arg("tail") = 0,
      py::arg("threads") = 0);
}

void register_kv_rows(py::module_& m) {
  m.def(
      "kv_select_rows",
      [](const py::object& scores, const py::object& k, long long n, long long tail,
         int threads) {
        py::array kk = checked_array<int64_t>(k, "k", 2, "int64");
        const std::size_t L = dim(kk, 0), Hkv = dim(kk, 1), R = L * Hkv;
        check_select_rows(n, tail);
        py::array s;
        const float* sp = nullptr;
        if (!scores.is_none()) {
          s = checked_array<float>(scores, "scores", 3, "float32");
          check_select_scores({s.shape(0), s.shape(1), s.shape(2)}, L, Hkv, n);
          sp = static_cast<const float*>(s.data());
        }
        const int64_t* kp = static_cast<const int64_t*>(kk.data());
        py::array_t<int64_t> offsets = make_offsets(kk, n, tail);
        const int64_t* op = offsets.data();
        py::array_t<int64_t> idx(static_cast<py::ssize_t>(op[R]));
        {
          int64_t* ip = idx.mutable_data();
          py::gil_scoped_release nogil;
          kv::select_rows(sp, R, static_cast<std::size_t>(n), kp, static_cast<std::size_t>(tail),
                          op, ip, threads);
        }
        return py::make_tuple(idx, offsets);
      },
      py::arg("scores"), py::arg("k"), py::arg("n"), py::arg("tail") = 0,
      py::arg("threads") = 0);

  m.def(
      "kv_l1_norms",
      [](const py::object& values, int threads) {
        py::array v = f32_array(values, "values", 1, 8);
        const std::size_t D = dim(v, v.ndim() - 1);
        check_head_dim(D);
        const std::size_t rows = static_cast<std::size_t>(v.size()) / D;
        std::vector<py::ssize_t> shape(v.shape(), v.shape() + v.ndim() - 1);
        py::array_t<float> out(shape);
        {
          const float* p = static_cast<const float*>(v.data());
          float* o = out.mutable_data();
          py::gil_scoped_release nogil;
          kv::l1_norms(p, rows, D, o, threads);
        }
        return out;
      },
      py::arg("values"), py::arg("threads") = 0);

  m.def(
      "kv_gather",
      [](const py::object& src, const py::object& offsets, const py::object& indices,
         long long padded_len, int threads) {
        if (!py::isinstance<py::array>(src)) throw TypeError("keys/values must be numpy arrays");
        py::array a = py::reinterpret_borrow<py::array>(src);
        LAMINA_CHECK(a.ndim() == 4, "keys/values must be 4-dimensional (L, H_kv, S, D), got ndim=",
                     a.ndim());
        LAMINA_CHECK(a.flags() & py::array::c_style,
                     "keys/values must be C-contiguous; pass numpy.ascontiguousarray(...)");
        py::array off = checked_array<int64_t>(offsets, "offsets", 1, "int64");
        py::array idx = checked_array<int64_t>(indices, "indices", 1, "int64");
        const std::size_t L = dim(a, 0), Hkv = dim(a, 1), S = dim(a, 2), D = dim(a, 3);
        const std::size_t R = L * Hkv;
        check_offsets_count(dim(off, 0), R);
        const int64_t* op = static_cast<const int64_t*>(off.data());
        check_offsets_span(op, R, dim(idx, 0));
        const std::size_t row_bytes = D * static_cast<std::size_t>(a.itemsize());
        std::vector<py::ssize_t> shape;
        if (padded_len > 0) {
          shape = {(py::ssize_t)L, (py::ssize_t)Hkv, (py::ssize_t)padded_len, (py::ssize_t)D};
        } else {
          shape = {(py::ssize_t)op[R], (py::ssize_t)D};
        }
        py::array out(a.dtype(), shape);
        {
          const void* sp = a.data();
          const int64_t* ip = static_cast<const int64_t*>(idx.data());
          void* o = out.mutable_data();
          py::gil_scoped_release nogil;
          kv::gather_rows(sp, R, S, row_bytes, op, ip,
                          static_cast<std::size_t>(padded_len > 0 ? padded_len : 0), o, threads);
        }
        return out;
      },
      py::arg("src"), py::arg("offsets"), py::arg("indices"), py::arg("padded_len") = 0,
      py::arg("threads") = 0);

  m.def(
      "kv_kth_largest",
      [](const py::object& scores, long long k) {
        py::array s = checked_array<float>(scores, "scores", 1, "float32");
        const std::size_t n = dim(s, 0);
        LAMINA_CHECK(k >= 1 && static_cast<std::size_t>(k) <= n, "k must be in [1, ", n, "]");
        const kv::Cut c =
            kv::kth_largest(static_cast<const float*>(s.data()), n, static_cast<std::size_t>(k));
        return py::make_tuple(c.value, c.greater, c.take_equal);
      },
      py::arg("scores"), py::arg("k"),
      "Testing aid: (k-th largest value, count greater, equal ones taken).");

  m.def(
      "kv_simd_isa",
      [](const std::string& isa) {
        if (isa != "?") kv::set_selection_isa(isa);
        return std::string(kv::selection_isa());
      },
      py::arg("isa") = "?",
      "Testing aid: the ISA of the KV row kernels; pass 'scalar'/'avx2'/'avx512' to force one, "
      "'' to restore the default.");
}

}  // namespace

void register_kv(py::module_& m) {
  register_kv_scores(m);
  register_kv_lava(m);
  register_kv_rows(m);
}

}  // namespace lamina::py_detail
