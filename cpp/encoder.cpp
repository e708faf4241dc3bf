#include "lamina/encoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/kernel_math.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

// exp(x) for x in [-87, 0] with kmath::expf_reduced (the core of kmath::fast_expf) and a plain
// 2^n scale, so that the compiler vectorises the loops that call it. Relative error ~1 ulp.
// (kmath::fast_expf itself adds NaN / overflow / underflow selects that keep GCC from
// if-converting the GELU loop: 10x slower here, and this argument is never NaN, positive or
// below -87.)
inline float exp_nonpos(float x) {
  x = std::max(x, -87.0f);
  float n;
  const float y = kmath::expf_reduced(x, n);
  return y * kmath::bits_to_float((static_cast<int32_t>(n) + 127) << 23);
}

// x * Phi(x), Phi(-|x|) = erfc(|x|/sqrt2)/2, erfc(z) = t*exp(-z^2 + P(t)), t = 1/(1+z/2)
// (Numerical Recipes erfcc; fractional error < 1.2e-7).
inline float gelu_erf(float x) {
  const float z = std::fabs(x) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float phi_neg = 0.5f * t * exp_nonpos(p - z * z);  // Phi(-|x|)
  // Phi(x) = Phi(-|x|) for x < 0 and 1 - Phi(-|x|) otherwise, without a branch.
  return x * (0.5f + std::copysign(0.5f - phi_neg, x));
}

constexpr std::size_t kRowsPerTask = 16;

// Row kernels, compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time
// (GCC function multiversioning; no -march=native).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LAMINA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LAMINA_CLONES
#endif

LAMINA_CLONES void gelu_row(float* __restrict row, const float* __restrict bias, std::size_t n) {
  if (bias) {
    for (std::size_t c = 0; c < n; ++c) row[c] = gelu_erf(row[c] + bias[c]);
  } else {
    for (std::size_t c = 0; c < n; ++c) row[c] = gelu_erf(row[c]);
  }
}

LAMINA_CLONES void layer_norm_row(float* __restrict row, const float* __restrict res, std::size_t d,
                                  const float* __restrict w, const float* __restrict b, float eps) {
  float sum = 0.0f;
  if (res) {
    for (std::size_t c = 0; c < d; ++c) {
      row[c] += res[c];
      sum += row[c];
    }
  } else {
    for (std::size_t c = 0; c < d; ++c) sum += row[c];
  }
  const float inv_d = 1.0f / static_cast<float>(d);
  const float mean = sum * inv_d;
  float var = 0.0f;
  for (std::size_t c = 0; c < d; ++c) {
    const float v = row[c] - mean;
    var += v * v;
  }
  const float inv_std = 1.0f / std::sqrt(var * inv_d + eps);
  for (std::size_t c = 0; c < d; ++c) row[c] = (row[c] - mean) * inv_std * w[c] + b[c];
}

}  // namespace

void bias_gelu_inplace(float* x, std::size_t rows, std::size_t cols, const float* bias,
                       int threads) {
  if (rows == 0 || cols == 0) return;
  const std::size_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  const int nt = threads_for(rows * cols, 1 << 15, threads);
  parallel_for(tasks, nt, [&](std::size_t task, int) {
    const std::size_t r1 = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::size_t r = task * kRowsPerTask; r < r1; ++r) gelu_row(x + r * cols, bias, cols);
  });
}

void add_layer_norm_inplace(float* x, const float* residual, std::size_t rows, std::size_t d,
                            const float* weight, const float* bias, float eps, int threads) {
  LAMINA_CHECK(d >= 1, "layer norm width must be >= 1");
  LAMINA_CHECK(eps >= 0.0f, "layer norm eps must be >= 0, got ", eps);
  if (rows == 0) return;
  const std::size_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  const int nt = threads_for(rows * d, 1 << 15, threads);
  parallel_for(tasks, nt, [&](std::size_t task, int) {
    const std::size_t r1 = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::size_t r = task * kRowsPerTask; r < r1; ++r)
      layer_norm_row(x + r * d, residual ? residual + r * d : nullptr, d, weight, bias, eps);
  });
}

}  // namespace lamina
