// cuda/lamina_cuda.hpp — host-side API of the CUDA backend, includable from plain C++.
//
// Launchers take raw device pointers, sizes and a stream (passed as void* = cudaStream_t so
// that callers need no CUDA headers). Every CUDA call is checked; failures throw
// std::runtime_error with the CUDA error string.
#pragma once

#include <cstddef>
#include <string>

namespace lamina::cuda {

/// Number of usable CUDA devices; 0 when there is no device or no driver (never throws).
int device_count() noexcept;
/// CUDA runtime version this build was linked against, e.g. "13.0".
std::string runtime_version();

/// y[i] = a * x[i] + y[i] for i < n, on `stream` (device pointers). Proves the build path.
void axpy(float a, const float* x, float* y, std::size_t n, void* stream);

/// Round trip through device memory with axpy; throws if the result is wrong or no device.
void selftest();

}  // namespace lamina::cuda
