// cuda/kv.hpp — CUDA versions of the KV selection core of lamina/kv.hpp (host launcher
// API, no CUDA headers).
//
// Same contracts, shapes and tie rule as lamina/kv.hpp (among equal scores the smaller
// position is kept; across heads the smaller (head, position); -0.0 == +0.0), and the same
// arithmetic in the same order, so the CPU functions are exact oracles:
//  * window_scores sums the window rows t ascending, pools j ascending, reduces the G query
//    heads ascending, then scales — one thread per output element (cuda/kv.cu is compiled with
//    -fmad=false, so no FMA contraction changes a rounding);
//  * layer_entropy reproduces the CPU's per-row sums (16-lane float partial sums over blocks of
//    1024, double across blocks) and combines them on the host with kv::entropy_from_sums;
//  * the selections (select_rows, layer_head_counts) are exact: device radix sorts of keys
//    (order-preserving float bits << 32 | inverted index), so ties resolve by index.
// Sizes on the host, data on the device: scores / rows / indices / caches are device
// pointers of the current device; small per-row parameters (k, offsets, totals, floors) are
// host arrays (copied to the device inside), and small results (entropies, head counts) are
// written to host memory. Every call is stream-ordered on `stream` and synchronises it where
// it must read a flag or a count; errors are lamina::ValueError / IndexError like the CPU's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/kv.hpp"

namespace lamina::cuda::kv {

/// Rows [L, H_kv, n] from scores [L, H, S] or window attention [L, H, w, S] (lamina/kv.hpp
/// ScoreSpec). scale_per_row [L*H_kv] or scale_per_token [L, H_kv, S] (at most one; device).
void window_scores(const float* in, const lamina::kv::ScoreSpec& spec, const float* scale_per_row,
                   const float* scale_per_token, float* out, void* stream);

/// Normalised entropy per layer of scores [L, H_kv, n] (device); out: L doubles (host).
void layer_entropy(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                   double* out_host, void* stream);

/// Global top-k across the heads of each layer with per-head floors (lamina/kv.hpp).
/// total, floor (nullable): L int64 (host); counts: L*H_kv int64 (host).
void layer_head_counts(const float* scores, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, const int64_t* total, const int64_t* floor,
                       int64_t* counts_host, void* stream);

/// Per-row top-k + tail (lamina/kv.hpp select_rows). scores [n_rows, n] (device; may be null
/// when every k is 0 or n); k [n_rows] and offsets [n_rows + 1] on the host; out (device)
/// receives offsets[n_rows] positions.
void select_rows(const float* scores, std::size_t n_rows, std::size_t n, const int64_t* k_host,
                 std::size_t tail, const int64_t* offsets_host, int64_t* out, void* stream);

/// out[r * len + i] = pattern[i] for r < n_rows (pattern: len int64 on the host). The row
/// layout of StreamingLLM and of "keep everything".
void fill_rows(const int64_t* pattern_host, std::size_t len, std::size_t n_rows, int64_t* out,
               void* stream);

/// out[r] = sum_d |values[r][d]| (d ascending, float32, as the CPU). ValueError on NaN/Inf.
void l1_norms(const float* values, std::size_t rows, std::size_t dim, float* out, void* stream);

/// Compaction of src [n_rows][S][row_bytes] to the kept positions (lamina/kv.hpp gather_rows);
/// offsets [n_rows + 1] and idx [offsets[n_rows]] are device arrays; offsets_host is the host
/// copy of offsets (lengths and sizes are taken from it). IndexError on a position outside
/// [0, S) (checked before anything is written).
void gather_rows(const void* src, std::size_t n_rows, std::size_t seq_len, std::size_t row_bytes,
                 const int64_t* offsets, const int64_t* offsets_host, const int64_t* idx,
                 std::size_t padded_len, void* dst, void* stream);

}  // namespace lamina::cuda::kv
