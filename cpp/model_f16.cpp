// GGUF matrices to fp16 on the host (lamina/model_f16.hpp).
#include "lamina/model_f16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/parallel.hpp"

namespace lamina::model {

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu)  // inf or NaN (NaN keeps a non-zero mantissa, quiet bit set)
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: ±inf
  if (e <= 0) {  // subnormal half (or zero)
    if (e < -10) return sign;  // below half the smallest subnormal: ±0
    mant |= 0x800000u;         // the implicit bit
    const int shift = 14 - e;  // 14..24
    const uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1);
    uint32_t h = half_mant;
    if (rem > mid || (rem == mid && (half_mant & 1u))) ++h;  // may carry into the exponent: fine
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may round up to inf: right
  return static_cast<uint16_t>(sign | h);
}

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

}  // namespace

void dequantize_f16(QType t, const void* data, std::size_t rows, std::size_t cols, uint16_t* out) {
  const std::size_t rb = row_bytes(t, cols);  // checks the block types' column count
  const uint8_t* base = static_cast<const uint8_t*>(data);
  for (std::size_t r = 0; r < rows; ++r) {
    const uint8_t* row = base + r * rb;
    uint16_t* o = out + r * cols;
    switch (t) {
      case QType::F32: {
        for (std::size_t j = 0; j < cols; ++j) {
          float v;
          std::memcpy(&v, row + 4 * j, 4);
          o[j] = float_to_half_bits(v);
        }
        break;
      }
      case QType::F16:
        std::memcpy(o, row, 2 * cols);
        break;
      case QType::Q4_0:
        for (std::size_t b = 0; b < cols / 32; ++b) {
          const uint8_t* blk = row + 18 * b;
          const float d = half_at(blk);
          for (int j = 0; j < 16; ++j) {
            o[32 * b + j] = float_to_half_bits(d * static_cast<float>((blk[2 + j] & 15) - 8));
            o[32 * b + j + 16] = float_to_half_bits(d * static_cast<float>((blk[2 + j] >> 4) - 8));
          }
        }
        break;
      case QType::Q4_1:
        for (std::size_t b = 0; b < cols / 32; ++b) {
          const uint8_t* blk = row + 20 * b;
          const float d = half_at(blk), m = half_at(blk + 2);
          for (int j = 0; j < 16; ++j) {
            // written as two operations so that no FMA contraction changes the float32 value
            const float lo = d * static_cast<float>(blk[4 + j] & 15);
            const float hi = d * static_cast<float>(blk[4 + j] >> 4);
            o[32 * b + j] = float_to_half_bits(lo + m);
            o[32 * b + j + 16] = float_to_half_bits(hi + m);
          }
        }
        break;
      case QType::Q8_0:
        for (std::size_t b = 0; b < cols / 32; ++b) {
          const uint8_t* blk = row + 34 * b;
          const float d = half_at(blk);
          const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
          for (int j = 0; j < 32; ++j) o[32 * b + j] = float_to_half_bits(d * static_cast<float>(q[j]));
        }
        break;
    }
  }
}

void window_attention_rows(const float* q, std::size_t w, int H, int Hk, int D, const float* keys,
                           std::size_t S, float* out, int n_threads) {
  LAMINA_CHECK(w >= 1 && w <= S, "attention rows: the window (", w, ") must be in [1, S = ", S, "]");
  LAMINA_CHECK(H >= 1 && Hk >= 1 && H % Hk == 0 && D >= 1, "attention rows: bad head shape");
  const std::size_t G = static_cast<std::size_t>(H / Hk), Dz = static_cast<std::size_t>(D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::size_t rows = static_cast<std::size_t>(H) * w;
  const int nt = threads_for(rows * S * Dz, std::size_t{1} << 20, n_threads);
  parallel_for(rows, nt, [&](std::size_t task, int) {
    const std::size_t hh = task / w, i = task % w;
    const float* qr = q + (i * static_cast<std::size_t>(H) + hh) * Dz;
    const float* K = keys + (hh / G) * S * Dz;
    float* o = out + (hh * w + i) * S;
    const std::size_t n = S - w + i + 1;
    float mx = -3.4e38f;
    for (std::size_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (std::size_t e = 0; e < Dz; ++e) s += qr[e] * K[j * Dz + e];
      o[j] = s * scale;
      mx = std::max(mx, o[j]);
    }
    float sum = 0.0f;
    for (std::size_t j = 0; j < n; ++j) sum += (o[j] = std::exp(o[j] - mx));
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < n; ++j) o[j] *= inv;
    std::fill(o + n, o + S, 0.0f);
  });
}

}  // namespace lamina::model
