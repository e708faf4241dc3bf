// lamina/model_f16.hpp — GGUF matrices dequantised to IEEE binary16 (the CUDA model's weights).
//
// The CUDA forward (cuda/model_cuda.hpp) keeps every matrix in fp16 on the device; the
// conversion runs here, on the host, so that it is plain C++ and tested without a GPU. Each
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

}  // namespace lamina::model
