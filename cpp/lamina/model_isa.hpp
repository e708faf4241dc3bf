// lamina/model_isa.hpp — internal to cpp/: the hot loops of the model runtime (lamina/model.hpp),
// compiled once per instruction set from cpp/model_kernels.inc (model_kernels_scalar.cpp,
// model_kernels_avx2.cpp, model_kernels_avx512.cpp, each with its own per-file flags) and
// chosen at run time by lamina/isa.hpp's rule (a Family of tables, model_dispatch.cpp), so
// LAMINA_SIMD caps it like every other family. Pure functions of their arguments; reentrant.
// The ISA paths differ only in summation order (FMA lanes), not in formulas.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/model.hpp"

namespace lamina::model::misa {

/// The packed layout of a block-quantised matrix (made once when a Model is built; the
/// same bytes as GGML's rows, rearranged): rows in groups of kPackRows, and for group g and
/// block index b (32 columns) one record of kPackRows · (GGML block bytes) bytes at
/// (g · n_blocks + b) · packed_block_bytes(type):
///   Q4_0: d[16] (binary16), then qs as 4 × 64 bytes;
///   Q4_1: d[16], m[16], then qs as 4 × 64 bytes;
///   Q8_0: d[16], then q as 8 × 64 bytes;
/// where 64-byte slice j holds, for row r of the group at bytes 4r .. 4r+3, the row's bytes
/// 4j .. 4j+3 of its GGML qs/q array (so a slice's low nibbles are elements 4j + i, its high
/// nibbles elements 16 + 4j + i; for Q8_0 slice j holds elements 4j + i). One 512-bit lane
/// (or two 256-bit ones) of 16 int32 sums then takes one row each: 4 products per
/// instruction, no horizontal sums. Rows past the matrix's end are zero (d = 0).
constexpr std::size_t kPackRows = 16;
inline std::size_t packed_block_bytes(QType t) {
  return kPackRows * (t == QType::Q4_0 ? 18 : t == QType::Q4_1 ? 20 : 34);
}

struct Kernels {
  const char* name;
  /// Columns of a GEMM panel (weight rows dequantised per panel; a multiple of the vector width).
  std::size_t panel_width;
  /// y[r - r0] = W_r · x for rows r in [r0, r1) of an F32 or F16 matrix with K columns
  /// stored at `w` with `rb` bytes per row (x: K floats).
  void (*gemv)(QType type, const uint8_t* w, std::size_t rb, std::size_t K, const float* x,
               std::size_t r0, std::size_t r1, float* y);
  /// y[r - r0] = W_r · x for rows r in [r0, r1) of a Q4_0/Q4_1/Q8_0 matrix in the packed
  /// layout (below) with K columns at `w`, x quantised to int8 per block of 32 (llama.cpp's
  /// scheme: quantise_q8): xq K int8, xd K/32 scales, xsum K/32 block sums of the quantised x
  /// (xd · Σ xq), xqs K/32 integer block sums Σ xq.
  void (*gemv_q8)(QType type, const uint8_t* w, std::size_t K, const int8_t* xq,
                  const float* xd, const float* xsum, const int32_t* xqs, std::size_t r0,
                  std::size_t r1, float* y);
  /// C[t, 0..16) = W_{16g..16g+16} · x_t for t < T: the rows of packed group g against T
  /// activation rows quantised as for gemv_q8 (xq row stride K; xd, xsum, xqs row stride
  /// K/32); C row stride ldc. The prefill's integer GEMM.
  void (*gemm_q8)(QType type, const uint8_t* w, std::size_t K, std::size_t g, const int8_t* xq,
                  const float* xd, const float* xsum, const int32_t* xqs, std::size_t T,
                  float* C, std::size_t ldc);
  /// C[t, 0..panel_width) = X[t, 0..K) · panel[0..K, 0..panel_width) for t in [0, T);
  /// panel is k-major (panel[k * panel_width + j]).
  void (*gemm_panel)(const float* panel, std::size_t K, const float* X, std::size_t ldx,
                     std::size_t T, float* C, std::size_t ldc);
  /// One query against n >= 1 cache entries: out[0..D) = Σ_i softmax(scale · q·K_i)_i V_i.
  /// `probs` (n floats, scratch) holds the softmax row on return; `stats` (optional, 2
  /// floats) receives the largest scaled score m and Σ_i exp(score_i − m), so that
  /// softmaxes over disjoint entry ranges can be merged.
  void (*attend)(const float* q, const float* K, const float* V, std::size_t n, std::size_t D,
                 float scale, float* probs, float* out, float* stats);
  /// Tokens per attention tile (the vector width).
  std::size_t tile_tokens;
  /// Floats of scratch attend_tile needs for head_dim D.
  std::size_t (*tile_scratch)(std::size_t D);
  /// Causal attention of a tile: nh query heads of one KV group (head a of token i at
  /// Q[i·ldq + a·D]) for nt <= tile_tokens consecutive tokens against the group's entries
  /// K/V (token i sees entries 0 .. n0 + i); out[i·ldo + a·D + e]. D a multiple of 4;
  /// ws: tile_scratch(D) floats. Same result as attend per query up to rounding (online
  /// softmax over blocks of entries).
  void (*attend_tile)(const float* Q, std::size_t ldq, std::size_t nh, std::size_t nt,
                      const float* K, const float* V, std::size_t n0, std::size_t D, float scale,
                      float* ws, float* O, std::size_t ldo);
  /// quantise_q8 below, vectorised (the same results bit for bit).
  void (*quantise)(const float* x, std::size_t K, int8_t* xq, float* xd, float* xsum,
                   int32_t* xqs);
  /// x[i] <- silu(g[i]) * u[i] for i < n (g = gate, u = up; written to out).
  void (*swiglu)(const float* g, const float* u, std::size_t n, float* out);
};

/// x (K floats, K a multiple of 32) -> xq (int8, round to nearest), xd (scale per block:
/// max|x|/127), xqs (Σ xq per block) and xsum (per block xd · Σ xq: the sum of the *quantised* activation, as
/// llama.cpp's Q8_1; so every product is that of the dequantised weight with the dequantised
/// activation — using the exact float sum instead for the Q4_1 offset measured 5x the KL
/// against the float32 reference, 0.021 vs 0.0044). Portable: every ISA path quantises alike.
void quantise_q8(const float* x, std::size_t K, int8_t* xq, float* xd, float* xsum,
                 int32_t* xqs);

/// The table of the active ISA (LAMINA_SIMD caps it; tests compare the paths by running
/// with LAMINA_SIMD=scalar / avx2 in a subprocess).
const Kernels& kernels();

}  // namespace lamina::model::misa
