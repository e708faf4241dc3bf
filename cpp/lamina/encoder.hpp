// lamina/encoder.hpp — element-wise kernels of a transformer encoder forward pass (CPU).
//
// Used by the torch-free sentence embedder (python/lamina/embedders/minilm.py): the matrix
// products run in BLAS; these kernels fuse the element-wise steps around them so that each
// touches the activations once, in cache, on all worker threads (numpy would take ~20 passes
// over memory for an exact GELU).
//
// All buffers are row-major float32, in place, no aliasing between distinct arguments.
// Thread safety: pure functions of their arguments; concurrent calls on disjoint buffers are
// safe. NaN/Inf inputs propagate (no checks on values).
#pragma once

#include <cstddef>

namespace lamina {

/// x[r, c] <- GELU(x[r, c] + bias[c]) for r < rows, c < cols, with the exact (erf) GELU
/// x * Phi(x). Phi is evaluated through a Chebyshev erfc fit with relative error < 1.2e-7
/// (below float32 resolution). `bias` may be null (no bias).
/// Shapes: x [rows x cols], bias [cols]. threads <= 0: default thread count.
void bias_gelu_inplace(float* x, std::size_t rows, std::size_t cols, const float* bias,
                       int threads);

/// x[r, :] <- LayerNorm(x[r, :] + residual[r, :]) * weight + bias over each row of width d,
/// LayerNorm(v) = (v - mean(v)) / sqrt(var(v) + eps) with the biased variance (as PyTorch).
/// `residual` may be null (plain LayerNorm). Shapes: x, residual [rows x d]; weight, bias [d].
/// Precondition: d >= 1, eps >= 0.
void add_layer_norm_inplace(float* x, const float* residual, std::size_t rows, std::size_t d,
                            const float* weight, const float* bias, float eps, int threads);

}  // namespace lamina
