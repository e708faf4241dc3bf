// kv_internal.hpp — private to cpp/kv_*.cpp: the SIMD row primitives of the KV selection core.
//
// One table of function pointers per instruction set (scalar, AVX2, AVX-512F): a family of
// lamina/isa.hpp with its own Selector (selector(); the scoring loops of kv_score.cpp follow
// it too), so the testing override _core.kv_simd_isa switches the KV kernels alone. The x86
// variants are compiled from this project's sources with GCC/Clang `target` attributes (no
// per-file flags); nothing here needs -march=native.
// All functions are pure and thread-safe. Inputs are finite floats (checked by callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lamina/isa.hpp"

namespace lamina::kv::detail {

/// Slack (elements) that `band` and `positions` may write past the returned count.
constexpr std::size_t kSlack = 16;

struct RowKernels {
  const char* isa;
  /// *gt = #{j : x[j] > t}, *eq = #{j : x[j] == t}.
  void (*count)(const float* x, std::size_t n, float t, std::size_t* gt, std::size_t* eq);
  /// Copies the x[j] with lo <= x[j] <= hi to out (in order; out holds n + kSlack floats) and
  /// returns how many; *above = #{j : x[j] > hi}.
  std::size_t (*band)(const float* x, std::size_t n, float lo, float hi, float* out,
                      std::size_t* above);
  /// Writes base + j for every j with x[j] > t (or >= t when `ge`) to out, ascending (out
  /// holds count + kSlack slots); returns the count.
  std::size_t (*positions)(const float* x, std::size_t n, float t, bool ge, int64_t base,
                           int64_t* out);
  /// Index of the m-th (1-based) j with x[j] == t; n if there are fewer than m.
  std::size_t (*nth_equal)(const float* x, std::size_t n, float t, std::size_t m);
  /// Copies the x[j] >= lo to vals and j to pos (in order; both hold n + kSlack entries) and
  /// returns how many.
  std::size_t (*collect)(const float* x, std::size_t n, float lo, float* vals, int32_t* pos);
};

/// Scratch memory of one selecting thread (opaque).
struct SelectScratch;
struct SelectScratchDeleter {
  void operator()(SelectScratch* p) const;
};
using SelectScratchPtr = std::unique_ptr<SelectScratch, SelectScratchDeleter>;
SelectScratchPtr make_select_scratch();
/// Row r of select_rows: the k best of x[0..n) (ascending positions), then n..n+tail-1.
/// Preconditions checked by check_select_args.
void select_row(const float* x, std::size_t n, std::size_t k, std::size_t tail, int64_t* out,
                SelectScratch& scratch);
/// select_rows' argument checks (ValueError).
void check_select_args(std::size_t n_rows, std::size_t n, const int64_t* k, std::size_t tail,
                       const int64_t* offsets);

/// LAVa's work on one layer's scores s [H_kv, n] with layer budget b (see kv::lava_layers):
/// writes the layer's counts and head budgets (H_kv each) and its kept positions (rows in
/// order, each followed by the tail: H_kv * (b + tail) entries) to `out`.
struct LavaScratch;
struct LavaScratchDeleter {
  void operator()(LavaScratch* p) const;
};
using LavaScratchPtr = std::unique_ptr<LavaScratch, LavaScratchDeleter>;
LavaScratchPtr make_lava_scratch();
/// Bytes of storage a LavaScratch holds.
std::size_t scratch_bytes(const LavaScratch& scratch);
void lava_layer(const float* s, std::size_t kv_heads, std::size_t n, std::size_t b, double alpha,
                std::size_t tail, int64_t* counts, int64_t* head_budgets, int64_t* out,
                LavaScratch& scratch);
/// A row's best entries, kept between lava_select's passes: every x[j] >= lo (vals) with j
/// (pos), in position order, m of them, stored by the caller (valid == false: none kept, the
/// row must be scored again).
struct RowCandidates {
  const float* vals = nullptr;
  const int32_t* pos = nullptr;
  std::size_t m = 0;
  float lo = 0.0f;
  bool valid = false;
};
/// Collects about `want` of the best entries of x[0..n) into vals / pos (cap entries each)
/// and describes them in c: the sample's order statistic of rank ~want sets lo, one SIMD pass
/// collects. Leaves c invalid when the row is short, `want` is a large share of n, or more
/// than cap entries reach lo (ties).
/// When fewer than `at_least` reach that threshold, the row is collected again at a lower one
/// (up to twice). `prefetch` (may be null): memory the caller reads next (prefetch_n floats,
/// e.g. the next row's input), fetched into the caches while the first pass runs (a hint).
void row_candidates(const float* x, std::size_t n, std::size_t want, std::size_t at_least,
                    std::size_t cap, float* vals, int32_t* pos, RowCandidates& c,
                    LavaScratch& scratch, const float* prefetch = nullptr,
                    std::size_t prefetch_n = 0);
/// lava_layer's result from the rows' candidates (rows[g], g < kv_heads), without the
/// layer's scores: valid when every row has candidates, they hold the layer's top
/// kv_heads * b, and every entry at or above the global cut was collected (the cut is not
/// below any row's lo). A row whose candidates are fewer than its head budget is selected
/// from row(g), its scores. Returns false, having written nothing, when the candidates do not
/// suffice (then lava_layer on the layer's scores gives the result).
bool lava_layer_candidates(const RowCandidates* rows, std::size_t kv_heads, std::size_t n,
                           std::size_t b, double alpha, std::size_t tail, int64_t* counts,
                           int64_t* head_budgets, int64_t* out, LavaScratch& scratch,
                           const std::function<const float*(std::size_t)>& row);
/// offsets[0..rows] of the rows (rows = L * H_kv): offsets[r + 1] = offsets[r] + head_budgets[r]
/// + tail.
void lava_offsets(std::size_t rows, std::size_t tail, const int64_t* head_budgets,
                  int64_t* offsets);

/// The ISA choice of the KV kernels: isa::active() unless set_row_isa forced one.
const isa::Selector& selector();
/// The active kernels (see above).
const RowKernels& row_kernels();
/// Testing aid: force "scalar", "avx2" or "avx512" ("" restores the default). Throws
/// ValueError when the CPU lacks the ISA. Not synchronised with running selections.
void set_row_isa(const std::string& isa);
/// The ISA name selection currently uses.
const char* row_isa();

}  // namespace lamina::kv::detail
