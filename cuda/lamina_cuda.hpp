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

// ---- helpers for the bindings' __cuda_array_interface__ dispatch (cuda/device.cu) ----------

/// Device ordinal owning `ptr` (device or managed memory). Throws lamina::ValueError when the
/// pointer is host memory or unknown to CUDA, std::runtime_error when no device is usable.
int pointer_device(const void* ptr);

/// Make `consumer` wait for the work queued so far on `producer` (event record + stream wait;
/// asynchronous). Streams are cudaStream_t values (0, 1 = legacy default, 2 = per-thread).
void stream_wait(void* consumer, void* producer);

/// Block the host until `stream` is idle.
void stream_sync(void* stream);

/// Sets the current device for its lifetime and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

/// Free / total memory of the current device in bytes.
void mem_info(std::size_t* free_bytes, std::size_t* total_bytes);

}  // namespace lamina::cuda
