// lamina/kv.hpp — KV-cache eviction: the selection core shared by every lamina.kv method.
//
// Notation: L layers, H query heads, H_kv KV heads (H_kv divides H; group G = H / H_kv, query
// head h belongs to KV head h / G, the repeat_kv layout of HF transformers), S prompt length,
// w observation-window rows, n <= S candidate positions per row (positions [0, n) are scored;
// the rest are kept or dropped by the method, not by score). A "row" is one (layer, KV head)
// pair, row index r = l * H_kv + g.
//
// The pieces, in the order a method uses them:
//   window_scores       input scores [L,H,S] or window attention [L,H,w,S] -> rows [L,H_kv,n]:
//                        reduce over the w rows (mean or sum), 1-D pooling (max/avg, odd kernel),
//                        GQA reduction over the G query heads (mean or max), optional per-row
//                        scale (LAVa's max value norm);
//   layer_entropy       normalised entropy of each layer's [H_kv, n] block (LAVa);
//   layer_head_counts   global top-k across the heads of a layer -> kept count per head
//                        (Ada-KV, LAVa), with an optional per-head floor;
//   select_rows         per-row top-k -> ragged kept positions sorted ascending, plus a tail
//                        of always-kept positions [n, n + tail);
//   gather_rows         compacts keys/values [L,H_kv,S,D] to the kept rows (ragged or padded).
//
// Ties (one rule everywhere): among equal scores the smaller position is kept; in a global
// (cross-head) selection the smaller (head, position) pair — head-major flat index — wins.
// -0.0 and +0.0 are equal. The result never depends on the thread count.
//
// Inputs must be finite (NaN/Inf -> ValueError); the functions check what they read.
// All functions run on up to `threads` workers (<= 0: lamina's default) through
// lamina::parallel_for, touch no global state and are safe to call concurrently; callers
// release the GIL around them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lamina::kv {

enum class Pool : int { None = 0, Max = 1, Avg = 2 };
enum class Reduce : int { Mean = 0, Max = 1, Sum = 2 };

/// What window_scores computes. For window attention (window > 0) the input is
/// A[L][H][w][S] and row (l, h) first becomes a[j] = sum_t A[l,h,t,j] (t ascending), then
/// a / w (Mean), a (Sum), or a[j] / min(w, S - j) (Sum with causal_normalize: the number of
/// window queries that can see position j, kvpress ObservedAttention's normaliser).
/// Without a window (window == 0) the input is already per position, X[L][H][S], a = X[l,h].
/// Then p = pool(a[0:n]) with kernel k (odd), stride 1, padding k/2:
///   Max: p[j] = max a[j-k/2 .. j+k/2] (out-of-range ignored; torch max_pool1d);
///   Avg: p[j] = (sum of in-range a[j-k/2 .. j+k/2], ascending) / k (zero padding counted,
///        torch avg_pool1d's count_include_pad=True).
/// Then the G query heads of a group are reduced: Mean = (p_0 + p_1 + ... ) / G (ascending),
/// Max = elementwise max. Finally the row is multiplied by its scale, if any.
struct ScoreSpec {
  std::size_t layers = 0;        // L >= 1
  std::size_t heads = 0;         // H >= 1
  std::size_t kv_heads = 0;      // H_kv >= 1, divides H
  std::size_t window = 0;        // w (0: input is [L,H,S]); 1 <= w <= S otherwise
  std::size_t seq_len = 0;       // S >= 1
  std::size_t n_candidates = 0;  // n, 0 <= n <= S
  Reduce window_reduce = Reduce::Mean;  // Mean or Sum
  bool causal_normalize = false;        // only with window_reduce == Sum
  Pool pool = Pool::None;
  std::size_t kernel = 1;               // odd, >= 1 (1 == no pooling)
  Reduce group_reduce = Reduce::Mean;   // Mean or Max
};

/// Per-row scale for window_scores (LAVa's nu): either one value per row (`per_row`,
/// [L*H_kv]) or per-token norms [L][H_kv][S] from which the scale of row r is
/// max_{j < n} norms[r][j] (`per_token`). At most one is set; values finite and >= 0.
struct RowScale {
  const float* per_row = nullptr;
  const float* per_token = nullptr;
};

/// Per-row sums behind the LAVa layer entropy (see layer_entropy): sum s, sum s log s, min s.
struct RowEntropySums {
  double sum = 0.0;
  double sum_slogs = 0.0;
  float min = 0.0f;
};

/// Rows [L, H_kv, n] from `in` (see ScoreSpec). `out` holds L*H_kv*n floats. With `sums`
/// (L*H_kv entries), each row's entropy sums are computed while the row is in cache.
/// Throws ValueError on a shape inconsistency, a non-finite input value (or a sum that
/// overflows float32), or a negative/non-finite scale.
void window_scores(const float* in, const ScoreSpec& spec, const RowScale& scale, float* out,
                   int threads, RowEntropySums* sums = nullptr);

/// The shape and option checks of window_scores (ValueError naming the offending field), shared
/// by the CPU and CUDA versions; `per_row_scale` / `per_token_scale`: which scale is given.
void check_score_spec(const ScoreSpec& spec, bool per_row_scale, bool per_token_scale);

/// window_scores fused with select_rows: each score row is selected from while it is still in
/// cache and never written out. Same result as window_scores into a temporary followed by
/// select_rows(tmp, L*H_kv, n, k, tail, offsets, out).
void score_select_rows(const float* in, const ScoreSpec& spec, const RowScale& scale,
                       const int64_t* k, std::size_t tail, const int64_t* offsets, int64_t* out,
                       int threads);

/// layer_entropy's E_l from the row sums of window_scores (rows of a layer combined).
/// Throws ValueError when a layer has a negative score.
void entropy_from_sums(const RowEntropySums* sums, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, double* out);

/// Normalised entropy per layer of scores [L, H_kv, n] (all >= 0, finite):
/// E_l = -sum p log p / log(N), p = s / sum(s) over the N = H_kv * n entries of layer l,
/// 0 log 0 = 0. E_l = 0 when N <= 1 or the layer's scores sum to 0. Logarithms are float32
/// (a vectorised Cephes logf, ~1 ulp), partial sums float32 over 1024 entries, double across
/// blocks: E_l is accurate to about 1e-6 (absolute).
/// Throws ValueError on a negative score. `out` holds L doubles.
void layer_entropy(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                   double* out, int threads);

/// Global top-k across heads. For each layer l, first the top floor[l] entries of every head
/// row are pinned (floor may be null: no pinning), then the total[l] best entries of the
/// layer's [H_kv, n] block are chosen with pinned entries ranked above all others; writes
/// counts[l*H_kv + g] = entries chosen in head g (so sum_g counts = total[l]). Because pinned
/// entries are each row's best and ties break by (head, position), the chosen entries of a
/// row are exactly that row's top counts[r] — select_rows with k = counts reproduces them.
/// Preconditions (ValueError): 0 <= floor[l] <= n, H_kv*floor[l] <= total[l] <= H_kv*n.
void layer_head_counts(const float* scores, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, const int64_t* total, const int64_t* floor,
                       int64_t* counts, int threads);

/// layer_head_counts' preconditions on total and floor (ValueError), shared by the CPU and
/// CUDA versions. Returns whether some layer keeps neither nothing nor everything (0 < total[l]
/// < H_kv*n), i.e. whether any counting is needed at all.
bool check_head_counts(std::size_t layers, std::size_t kv_heads, std::size_t n,
                       const int64_t* total, const int64_t* floor);

/// Split `total` into m integers proportional to weights (negative weights count as 0), each
/// in [0, cap], summing to total: shares above cap are clamped and the excess re-split over the
/// rest in proportion (water filling; all-zero weights split uniformly), then rounded by
/// largest remainder, ties to the lower index. Float noise is neutralised as in
/// lamina.kv.method.apportion (the Python version; same rule, same results): a share within 1e-9
/// of an integer is that integer, remainders compare at 1e-9 resolution.
/// Precondition (ValueError): 0 <= total <= m * cap.
void apportion(const double* weights, std::size_t m, int64_t total, int64_t cap, int64_t* out);

/// LAVa's per-layer allocation and selection in one pass over each layer of scores
/// [L, H_kv, n]: n_g = entries of head g among the layer's top H_kv * layer_budget[l]
/// (global top-k, ties: smaller (head, position)), head budgets
/// k_g = apportion((1 - alpha) n_g + alpha layer_budget[l], H_kv * layer_budget[l], n), then
/// each row keeps its top k_g positions (select_rows' rule) followed by the tail
/// [n, n + tail). Writes counts and head_budgets (L*H_kv each) and the kept positions into
/// out, row r at offsets[r] with offsets[r] = sum_{r' < r} (k_r' + tail) (out holds
/// L * H_kv * tail + H_kv * sum_l layer_budget[l] entries). The layer's collected candidates
/// serve the per-row selections, so most rows are not read again.
/// Preconditions (ValueError): 0 <= layer_budget[l] <= n, 0 <= alpha <= 1.
void lava_layers(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                 const int64_t* layer_budget, double alpha, std::size_t tail, int64_t* counts,
                 int64_t* head_budgets, int64_t* offsets, int64_t* out, int threads);

/// LAVa end to end (lamina.kv.LAVa): window_scores (as `spec`, `scale`) of every row, the
/// layer entropies (written to entropy[L]), layer budgets
/// apportion(entropy, L * per_head, n) (written to layer_budget[L]), then lava_layers' work
/// per layer (counts, head_budgets, offsets [L*H_kv + 1], out). The score tensor is never
/// stored: the first pass keeps only each row's best ~1.25 * per_head + 64 entries (with their
/// positions; at least per_head + per_head / 8 + 32 where ties allow: a row the sampled
/// threshold left short is collected again from cache; the storage, L * H_kv * 2 * that * 8
/// bytes, stays with the calling thread for reuse when it is at most 16 MiB, as does the
/// calling thread's scratch), from which the per-layer selections run; a layer or row they do
/// not cover (a dominant head, a layer budget well above per_head, many ties) is scored again.
/// Preconditions (ValueError): those of window_scores, per_head <= n, 0 <= alpha <= 1;
/// out holds L * H_kv * (per_head + tail) entries.
void lava_select(const float* in, const ScoreSpec& spec, const RowScale& scale,
                 std::size_t per_head, double alpha, std::size_t tail, double* entropy,
                 int64_t* layer_budget, int64_t* counts, int64_t* head_budgets,
                 int64_t* offsets, int64_t* out, int threads);

/// Per-row top-k: for rows r < n_rows of scores [n_rows, n], writes into
/// out[offsets[r] .. offsets[r+1]) the positions of the row's k[r] best scores in ascending
/// order, followed by the tail positions n, n+1, ..., n+tail-1.
/// Preconditions (ValueError): 0 <= k[r] <= n and offsets[r+1] - offsets[r] == k[r] + tail.
/// `scores` may be null when every k[r] is 0 or n (no scoring needed).
void select_rows(const float* scores, std::size_t n_rows, std::size_t n, const int64_t* k,
                 std::size_t tail, const int64_t* offsets, int64_t* out, int threads);

/// L1 norm of every D-vector of values [rows, D] (float32): out[r] = sum_d |v[r][d]|.
/// Throws ValueError on a non-finite value.
void l1_norms(const float* values, std::size_t rows, std::size_t dim, float* out, int threads);

/// Compacts src [n_rows][S][row_bytes] (row r = one (layer, KV head), S positions of
/// row_bytes each) to the kept positions idx[offsets[r] .. offsets[r+1]) of each row.
/// Ragged (padded_len == 0): dst is [offsets[n_rows]][row_bytes] in the same order.
/// Padded (padded_len >= max length): dst is [n_rows][padded_len][row_bytes], zero-filled
/// after each row's length. Throws IndexError on a position outside [0, S).
void gather_rows(const void* src, std::size_t n_rows, std::size_t seq_len, std::size_t row_bytes,
                 const int64_t* offsets, const int64_t* idx, std::size_t padded_len, void* dst,
                 int threads);

// ---- selection primitive (exposed for tests and reuse) ----------------------------------

/// Where the k best of a row are cut: the k-th largest value `value`, how many values are
/// strictly greater (`greater`), and how many values equal to `value` are taken
/// (`take_equal`, the lowest positions first); greater + take_equal == k.
struct Cut {
  float value = 0.0f;
  std::size_t greater = 0;
  std::size_t take_equal = 0;
};

/// Exact k-th largest of x[0..n) (finite), 1 <= k <= n. Expected O(n): a strided sample
/// brackets the answer, one SIMD pass packs the values inside the bracket, nth_element on
/// those decides (nth_element on a copy of the row when the bracket misses or n is small).
/// -0.0 and +0.0 compare equal.
Cut kth_largest(const float* x, std::size_t n, std::size_t k);

/// The SIMD path of the selection kernels: "scalar", "avx2" or "avx512" (lamina::simd's
/// choice: the best the CPU supports, capped by LAMINA_SIMD).
const char* selection_isa();
/// Testing aid: force a SIMD path ("" restores the default). Throws ValueError when the CPU
/// or build lacks it. Do not call while selections run in other threads.
void set_selection_isa(const std::string& isa);

}  // namespace lamina::kv
