// lamina/model_f16.hpp — the host side of the model's CUDA path (cuda/model.hpp): GGUF
// matrices dequantised to IEEE binary16 (the device weights), and the attention record of a
// prefill window computed from the queries the device returns. Plain C++, tested without a GPU.
//
// The CUDA forward keeps every matrix in fp16 on the device; the conversion runs here. Each
// element is computed in float32 exactly as lamina/model.hpp's CPU path dequantises it
// (Q4_0: d·(q - 8); Q4_1: d·q + m; Q8_0: d·q; F16 as stored; F32 as stored), then rounded to
// the nearest binary16 (ties to even; overflow to ±inf, NaN kept NaN).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/model.hpp"

namespace lamina::model {

/// binary32 -> binary16 bits, round to nearest even (subnormals, ±inf and NaN handled).
uint16_t float_to_half_bits(float f);

/// `rows` stored rows of `cols` elements each (GGUF layout: row_bytes(t, cols) bytes per row,
/// contiguous) to fp16 bits, row-major rows × cols into `out`. ValueError for block types
/// whose `cols` is not a multiple of 32.
void dequantize_f16(QType t, const void* data, std::size_t rows, std::size_t cols, uint16_t* out);

/// One layer of lamina::model::AttentionRecord::out from a window's queries and the keys:
/// q (w × H × D, after RoPE: the last w queries of a call), keys (Hk × S × D: every entry of each
/// KV head after the call), out (H × w × S): row i of query head hh is the softmax of
/// q·k / sqrt(D) over the first S - w + i + 1 entries of KV head hh / (H / Hk) (causal: query i
/// is token S - w + i), zeros after. ValueError unless 1 <= w <= S and H a multiple of Hk.
/// n_threads <= 0: the core's default.
void window_attention_rows(const float* q, std::size_t w, int H, int Hk, int D, const float* keys,
                           std::size_t S, float* out, int n_threads);

}  // namespace lamina::model
